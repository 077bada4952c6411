// Cache sources: where a pipeline's overlap comes from. A source is the stage that reads the
// prompt's block hashes first: `match` runs once per request before the filters, `commit` remembers
// what was sent to the chosen worker (never on a dry run).
//
// kv (precise): overlap per medium from the event-fed block index (src/kv), raised by "predicted"
//   entries — the blocks of this router's own recent decisions, remembered for
//   router.kv.predicted_ttl_ms, so a burst of requests sharing a new prefix does not scatter before
//   the engine's BlockStored events arrive (Dynamo's --router-predicted-ttl-secs, docs/references.md#routers-1.7).
//   A prediction is dropped as soon as the index reports the engine removed one of its blocks.
// prefix (approximate): no engine events. The router remembers which block hashes it sent to which
//   worker (router.prefix: TTL after the last send, per-worker capacity, least recently sent
//   forgotten first; ../prefix-memory.ts) and treats them as GPU overlap (Dynamo's
//   --no-router-kv-events).
import type { KvIndex, Overlap } from "../../kv/indexer.ts";
import type { PrefixMemory } from "../prefix-memory.ts";
import type { CacheSource } from "./types.ts";

/** An index that can also match u32 halves (src/kv BlockIndex): no per-hash BigInt split in JS. */
type PairIndex = KvIndex & { findMatchesPairs(pairs: Uint32Array, n: number): Map<string, Overlap> };

/**
 * A prompt's hashes as u32 halves (`[lo, hi]` per hash, little-endian), in a buffer reused across
 * calls: one native typed-array copy instead of a BigInt split per hash.
 */
function pairsOf(hashes: readonly bigint[]): Uint32Array {
  if (scratch.length < hashes.length) {
    scratch = new BigUint64Array(Math.max(hashes.length, 2 * scratch.length));
    scratchU32 = new Uint32Array(scratch.buffer);
  }
  scratch.set(hashes);
  return scratchU32;
}
let scratch = new BigUint64Array(2048);
let scratchU32 = new Uint32Array(scratch.buffer);
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

export function kvSource(index: KvIndex, predicted: PrefixMemory | null): CacheSource {
  const pairIndex = LITTLE_ENDIAN && "findMatchesPairs" in index && typeof index.findMatchesPairs === "function" ? (index as PairIndex) : null;
  // A prediction stands in for a BlockStored event not yet seen; once the index sees the engine
  // evict those blocks (or drop the worker's cache) the prediction is wrong: drop it (issue 11).
  const unsubscribe =
    predicted && index.onRemoved
      ? index.onRemoved((worker, removal) => {
          if (removal === null) predicted.forget(worker);
          else if (removal.medium === "gpu") predicted.dropRemoved(worker, removal.pairs, removal.n);
        })
      : null;
  return {
    type: "kv-index",
    needs: { blockHashes: true },
    match(hashes, nowMs, pairs) {
      const overlap = new Map<string, Overlap>();
      const pred = new Map<string, number>();
      if (hashes.length === 0) return { overlap, predicted: pred };
      const found = pairIndex ? pairIndex.findMatchesPairs(pairs ?? pairsOf(hashes), hashes.length) : index.findMatches(hashes);
      for (const [w, o] of found) overlap.set(w, { ...o });
      if (predicted) {
        for (const [w, n] of predicted.overlaps(hashes, nowMs)) {
          pred.set(w, n);
          const o = overlap.get(w);
          if (!o) overlap.set(w, { gpu: n, cpu: 0, disk: 0 });
          else if (n > o.gpu) {
            // The predicted GPU run replaces the start of the tier continuation (indexer.ts Overlap).
            const cpuEnd = Math.max(n, o.gpu + o.cpu);
            const diskEnd = Math.max(cpuEnd, o.gpu + o.cpu + o.disk);
            o.gpu = n;
            o.cpu = cpuEnd - n;
            o.disk = diskEnd - cpuEnd;
          }
        }
      }
      return { overlap, predicted: pred };
    },
    commit(chosen, f) {
      predicted?.record(chosen.id, f.hashes, f.nowMs);
    },
    // The event index learns of removals and restarts from the engine's own stream (src/kv).
    forget: (worker) => predicted?.forget(worker),
    close: () => unsubscribe?.(),
  };
}

export function prefixSource(memory: PrefixMemory): CacheSource {
  return {
    type: "prefix-memory",
    needs: { blockHashes: true },
    match(hashes, nowMs) {
      const overlap = new Map<string, Overlap>();
      for (const [w, n] of memory.overlaps(hashes, nowMs)) overlap.set(w, { gpu: n, cpu: 0, disk: 0 });
      return { overlap, predicted: new Map() };
    },
    commit: (chosen, f) => memory.record(chosen.id, f.hashes, f.nowMs),
    forget: (worker) => memory.forget(worker),
  };
}
