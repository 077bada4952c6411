// llm-d's scheduling stages, so that its "Optimized Baseline" profile can be run as a herd pipeline
// (the `approx` policy plus router.pipeline; bench/routing-quality/lib.ts `llmdOptimizedBaseline`).
// Facts read from llm-d/llm-d-inference-scheduler @520af478 (2026-05-17, Go module llm-d-router)
// and llm-d/llm-d guides/optimized-baseline/scheduler/optimized-baseline.values.yaml @29b59cb:
//
// approx-prefix (cache source) — llm-d's approx-prefix-cache-producer
//   (pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/{plugin,indexer,types}.go):
//   the router's own routing history, no engine events. The prompt's first maxPrefixBlocksToMatch
//   (default 256) block hashes, chained; per pod an LRU of hashes whose capacity is the engine's
//   GPU block count (autoTune, from its metrics) — here router.prefix.max_blocks_per_worker — and a
//   hash → pods map the LRU's eviction keeps in step. Match: walk the hashes from the first, stop at
//   the first hash no pod holds, every pod holding a hash gets +1. After the pick (PreRequest) the
//   request's hashes are added for the chosen pod. No TTL. (llm-d hashes 4 characters per token of
//   the request text; herd uses the prompt's token block hashes, which is what that approximates.)
// prefix-share — prefix-cache-scorer (scorer/prefix/plugin.go): matched blocks / hashed blocks.
// queue — queue-scorer (scorer/queuedepth/queue.go): (maxQ − q) / (maxQ − minQ) over the candidates'
//   scraped waiting queues; all equal → 1.
// kv-utilization — kv-cache-utilization-scorer (scorer/kvcacheutilization): 1 − scraped KV usage.
// no-hit-lru — no-hit-lru-scorer (scorer/nohitlru/no_hit_lru.go): a request no candidate has any
//   prefix of is "cold": candidates never given a cold request score 1 − i/(n−1) in order, the
//   others 1 − (never_used + LRU position)/(n−1) (oldest first, floor 0); a warm request scores
//   0.5 everywhere. A cold request's pick moves its worker to the LRU's newest end (capacity 1024).
// llm-d scores are in [0, 1], higher wins, and the profile takes Σ weight × clamp(score) then the
// max-score picker (shuffle, highest first: a random tie-break). In herd's pipeline a cost is summed
// and the lowest wins, so each stage here returns cost = −clamp(score): the `min` picker then picks
// exactly llm-d's max-score endpoint, with the same random tie-break.
import type { Overlap } from "../../kv/indexer.ts";
import type { CacheSource, RequestFacts, Scorer } from "./types.ts";
import { r3 } from "./scorers.ts";

/** llm-d's defaultMaxPrefixBlocks (approximateprefix/types.go): prompts match on at most this many blocks. */
export const LLMD_MAX_PREFIX_BLOCKS = 256;
/** llm-d's no-hit-lru-scorer defaultLRUSize. */
export const NO_HIT_LRU_SIZE = 1024;

const clamp01 = (x: number) => Math.min(1, Math.max(0, x));

export function approxSource(capacityPerWorker: number, maxBlocks = LLMD_MAX_PREFIX_BLOCKS): CacheSource {
  const cap = Math.max(1, Math.floor(capacityPerWorker));
  /** Per worker: hashes in recency order (least recent first). Bounded by `cap`. */
  const lru = new Map<string, Map<bigint, true>>();
  const holders = new Map<bigint, Set<string>>();
  const drop = (worker: string, h: bigint) => {
    const s = holders.get(h);
    if (!s) return;
    s.delete(worker);
    if (s.size === 0) holders.delete(h);
  };
  return {
    type: "approx-prefix",
    needs: { blockHashes: true },
    match(hashes) {
      const count = new Map<string, number>();
      const n = Math.min(hashes.length, maxBlocks);
      for (let i = 0; i < n; i++) {
        const s = holders.get(hashes[i]!);
        if (!s) break;
        for (const w of s) count.set(w, (count.get(w) ?? 0) + 1);
      }
      const overlap = new Map<string, Overlap>();
      for (const [w, c] of count) overlap.set(w, { gpu: c, cpu: 0, disk: 0 });
      return { overlap, predicted: new Map() };
    },
    commit(chosen, f) {
      let mine = lru.get(chosen.id);
      if (!mine) lru.set(chosen.id, (mine = new Map()));
      const n = Math.min(f.hashes.length, maxBlocks);
      for (let i = 0; i < n; i++) {
        const h = f.hashes[i]!;
        mine.delete(h);
        mine.set(h, true);
        let s = holders.get(h);
        if (!s) holders.set(h, (s = new Set()));
        s.add(chosen.id);
        if (mine.size > cap) {
          const oldest = mine.keys().next().value!;
          mine.delete(oldest);
          drop(chosen.id, oldest);
        }
      }
    },
    forget(worker) {
      const mine = lru.get(worker);
      if (!mine) return;
      for (const h of mine.keys()) drop(worker, h);
      lru.delete(worker);
    },
  };
}

/** Blocks llm-d hashes for this request (its total in matched / total). */
export function hashedBlocks(f: RequestFacts): number {
  return Math.min(f.hashes.length, LLMD_MAX_PREFIX_BLOCKS);
}

export const prefixShareScorer: Scorer = {
  type: "prefix-share",
  needs: { blockHashes: true },
  explain: (t) => `prefix ${t.prefix_matched_blocks}/${t.prefix_hashed_blocks} blocks`,
  score(w, f) {
    const total = hashedBlocks(f);
    const matched = Math.min(total, f.overlap.get(w.id)?.gpu ?? 0);
    const score = total === 0 ? 0 : matched / total;
    return { cost: -score, terms: { prefix_matched_blocks: matched, prefix_hashed_blocks: total, prefix_score: r3(score) } };
  },
};

/** min/max of the peers' waiting queues, memoised on the peers array (one per decision). */
function queueRange(): (peers: readonly { load: { waiting: number | null } }[]) => [number, number] {
  let last: readonly unknown[] | null = null;
  let range: [number, number] = [0, 0];
  return (peers) => {
    if (peers !== last) {
      let min = Infinity;
      let max = -Infinity;
      for (const p of peers) {
        const q = p.load.waiting ?? 0;
        if (q < min) min = q;
        if (q > max) max = q;
      }
      range = [min, max];
      last = peers;
    }
    return range;
  };
}

export function queueScorer(): Scorer {
  const rangeOf = queueRange();
  return {
    type: "queue",
    needs: { load: true },
    explain: (t) => `waiting ${t.waiting_queue} (queue score ${t.queue_score})`,
    score(w, _f, peers) {
      const q = w.load.waiting ?? 0;
      const [min, max] = rangeOf(peers ?? [w]);
      const score = max === min ? 1 : (max - q) / (max - min);
      return { cost: -clamp01(score), terms: { waiting_queue: q, queue_min: min, queue_max: max, queue_score: r3(score) } };
    },
  };
}

export const kvUtilizationScorer: Scorer = {
  type: "kv-utilization",
  needs: { load: true },
  explain: (t) => `kv usage ${t.kv_usage} (score ${t.kv_utilization_score})`,
  score(w) {
    const score = clamp01(1 - (w.load.kv_usage ?? 0));
    return { cost: -score, terms: { kv_utilization_score: r3(score) } };
  },
};

/** A request is cold when no worker the source knows of holds any of its blocks. */
function isCold(f: RequestFacts): boolean {
  for (const o of f.overlap.values()) if (o.gpu > 0) return false;
  return true;
}

export function noHitLruScorer(size = NO_HIT_LRU_SIZE): Scorer {
  /** Workers given a cold request, least recent first. */
  const lru = new Map<string, true>();
  return {
    type: "no-hit-lru",
    needs: { blockHashes: true },
    explain: (t) => (t.cold === 1 ? `cold request: LRU rank ${t.no_hit_rank} (score ${t.no_hit_score})` : "warm request (no-hit-lru neutral)"),
    score(w, f, peers) {
      const all = peers ?? [w];
      if (!isCold(f)) return { cost: -0.5, terms: { cold: 0, no_hit_rank: null, no_hit_score: 0.5 } };
      const n = all.length;
      if (n <= 1) return { cost: -1, terms: { cold: 1, no_hit_rank: 0, no_hit_score: 1 } };
      const positions = [...lru.keys()];
      const never = all.filter((p) => !lru.has(p.id));
      const rank = lru.has(w.id) ? never.length + positions.indexOf(w.id) : never.findIndex((p) => p.id === w.id);
      const score = clamp01(1 - rank / (n - 1));
      return { cost: -score, terms: { cold: 1, no_hit_rank: rank, no_hit_score: r3(score) } };
    },
    commit(chosen, f) {
      if (!isCold(f)) return;
      lru.delete(chosen.id);
      lru.set(chosen.id, true);
      if (lru.size > size) lru.delete(lru.keys().next().value!);
    },
    forget: (worker) => void lru.delete(worker),
  };
}
