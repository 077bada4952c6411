// Pipeline scorers: each returns a cost in KV blocks (lower wins) and the terms it used.
//
// kv-cost — Dynamo's cost (../cost.ts) with load from herd's own leases, corrected by the last
//   scrape: requests the engine reported beyond herd's in-flight count at that scrape ("outside"
//   traffic, ../load.ts outsideRequests) are assumed to be the size of this request; those still
//   waiting add their prompt to the prefill term, all of them add their blocks to the decode term.
//   With router.kv.prefill_load_model `progress` the prefill term uses what herd's prompts still have
//   to compute (../lease.ts prefillRemaining) instead of their full size — but when the engine's
//   KV cache is nearly full (scraped kv_usage ≥ KV_BLOCKED_USAGE) the newest of them it reports
//   waiting count in full: a prompt queued for free blocks computes nothing. (At lower usage the
//   engine's queue is waiting for a token budget and drains within steps: counting it in full
//   there cost rag and doc-qa 5-10 % of TTFT p95 near saturation, bench/routing-never-worse.ts.)
//   With router.kv.decode_load_model `requests` (default) the decode term is every in-flight
//   request's blocks in full plus this request's (../lease.ts heldBlocks): a decode step reads each
//   sequence's KV, so sharing a prefix saves memory, not step time. `distinct` is Dynamo's: a shared
//   prefix counts once and this request's blocks already active on the worker are free — which,
//   when every worker holds every document, makes a worker busy with questions on one document look
//   cheaper than an idle one and piles that document's requests onto it (issue 25).
// load — the effective load in requests (in_flight + outside, ../load.ts).
// decode-load — kv-cost's decode term alone (the P/D decode leg's scorer): the KV blocks active on
//   the worker (herd's leases, plus outside requests at this request's size) plus the blocks this
//   request would add; a decode worker computes no prompt, so overlap and prefill load do not count.
// overlap — minus the prompt's leading blocks the cache source says the worker holds (GPU): the
//   longest match wins, nothing else counts (production-stack's prefixaware, ../policies/prefixaware.ts).
// session — minus this request's blocks on the worker its session was last routed to, 0 elsewhere:
//   with weight w the session's worker is kept unless its other costs exceed the best worker's by
//   more than w × the request's blocks ("prefer the session's worker unless clearly worse"). It
//   remembers each session's last worker in its commit (LRU, SESSION_BINDINGS_MAX). The `session`
//   *policy* is a different thing: a hash ring (pickers.ts `ring`) that needs no memory.
import type { KvPolicyConfig } from "../../config/types.ts";
import type { Overlap } from "../../kv/indexer.ts";
import { kvCost } from "../cost.ts";
import { effectiveLoad, outsideRequests } from "../load.ts";
import type { Scorer } from "./types.ts";

/** Session bindings kept (LRU); a forgotten session simply loses its preference. */
export const SESSION_BINDINGS_MAX = 65_536;

const NO_OVERLAP: Overlap = { gpu: 0, cpu: 0, disk: 0 };

/** Scraped KV usage from which the engine's waiting requests are taken to be queued for blocks. */
export const KV_BLOCKED_USAGE = 0.8;

/** Requests the engine reports waiting for free KV blocks (0 unless its KV is nearly full). */
function kvBlocked(load: Readonly<{ waiting: number | null; kv_usage: number | null }>): number {
  return (load.kv_usage ?? 0) >= KV_BLOCKED_USAGE ? (load.waiting ?? 0) : 0;
}

export function kvCostScorer(cfg: KvPolicyConfig): Scorer {
  const knobs = { prefillLoadScale: cfg.prefill_load_scale, credit: cfg.overlap_credit };
  const progress = cfg.prefill_load_model === "progress";
  const perRequest = cfg.decode_load_model === "requests";
  return {
    type: "kv-cost",
    needs: { blockHashes: true, load: true },
    explain: (t, f) =>
      `prefill ${t.prefill_blocks} + decode ${t.decode_blocks} blocks; overlap gpu/cpu/disk ${t.overlap_gpu}/${t.overlap_cpu}/${t.overlap_disk} of ${f.requestBlocks} blocks`,
    score(w, f) {
      const o = f.overlap.get(w.id) ?? NO_OVERLAP;
      const pre = progress && f.load.prefillRemaining ? f.load.prefillRemaining(w.id, kvBlocked(w.load)) : f.load.prefilling(w.id);
      const { running, waiting, in_flight } = w.load;
      const outside = outsideRequests(w.load);
      const outsideWaiting = Math.min(outside, Math.max(0, (waiting ?? 0) - pre.requests));
      const activeOverlap = f.activeOverlap.get(w.id) ?? 0;
      const herdBlocks = perRequest && f.load.heldBlocks ? f.load.heldBlocks(w.id) : f.load.activeBlocks(w.id);
      const newBlocks = perRequest ? f.requestBlocks : Math.max(0, f.requestBlocks - activeOverlap);
      const activePrefillTokens = pre.tokens + outsideWaiting * f.tokens;
      const activeBlocks = herdBlocks + outside * f.requestBlocks;
      const t = kvCost(
        { requestTokens: f.tokens, blockSize: f.blockSize, overlap: o, activePrefillTokens, activeBlocks, newBlocks },
        knobs,
      );
      return {
        cost: t.cost,
        terms: {
          overlap_gpu: o.gpu,
          overlap_cpu: o.cpu,
          overlap_disk: o.disk,
          predicted_gpu: f.predicted.get(w.id) ?? 0,
          credit_blocks: r3(t.credit_blocks),
          prefilling_requests: pre.requests,
          active_prefill_tokens: activePrefillTokens,
          raw_prefill_blocks: r3(t.raw_prefill_blocks),
          prefill_blocks: r3(t.prefill_blocks),
          active_blocks: activeBlocks,
          new_blocks: newBlocks,
          outside_requests: outside,
          decode_blocks: t.decode_blocks,
          in_flight: in_flight,
          running,
          waiting,
          kv_cost: r3(t.cost),
        },
      };
    },
  };
}

export const decodeLoadScorer: Scorer = {
  type: "decode-load",
  needs: { load: true },
  explain: (t) => `decode ${t.decode_blocks} blocks (${t.active_blocks} active + ${t.new_blocks} new)`,
  score(w, f) {
    const outside = outsideRequests(w.load);
    const activeBlocks = f.load.activeBlocks(w.id) + outside * f.requestBlocks;
    const newBlocks = Math.max(0, f.requestBlocks - (f.activeOverlap.get(w.id) ?? 0));
    const decode = activeBlocks + newBlocks;
    return { cost: decode, terms: { active_blocks: activeBlocks, new_blocks: newBlocks, outside_requests: outside, decode_blocks: decode, kv_usage: w.load.kv_usage } };
  },
};

export const loadScorer: Scorer = {
  type: "load",
  needs: { load: true },
  score(w) {
    const load = effectiveLoad(w.load);
    return { cost: load, terms: { load } };
  },
};

export const overlapScorer: Scorer = {
  type: "overlap",
  needs: { blockHashes: true },
  explain: (t, f) => `longest match ${t.overlap_blocks} of ${f.requestBlocks} blocks`,
  score(w, f) {
    const blocks = f.overlap.get(w.id)?.gpu ?? 0;
    return { cost: -blocks, terms: { overlap_blocks: blocks } };
  },
};

export function sessionScorer(): Scorer {
  const bindings = new Map<string, string>();
  return {
    type: "session",
    needs: { sessionKey: true },
    score(w, f) {
      const id = f.req.sessionId;
      const mine = id ? bindings.get(id) === w.id : false;
      return { cost: mine ? -f.requestBlocks : 0, terms: { session_worker: mine ? 1 : 0 } };
    },
    commit(chosen, f) {
      const id = f.req.sessionId;
      if (!id) return;
      bindings.delete(id);
      bindings.set(id, chosen.id);
      if (bindings.size > SESSION_BINDINGS_MAX) bindings.delete(bindings.keys().next().value!);
    },
  };
}

/** Three decimals keep explain output readable; costs themselves are never rounded. */
export function r3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
