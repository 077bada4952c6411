// kv (precise): overlap per medium from the event-fed block index (src/kv), raised by "predicted"
// entries — the blocks of this router's own recent decisions, remembered for
// router.kv.predicted_ttl_ms, so a burst of requests sharing a new prefix does not scatter before
// the engine's BlockStored events arrive (Dynamo's --router-predicted-ttl-secs, routers.md §1.7).
// The pipeline (router.pipeline) then filters, scores (Dynamo's cost by default) and picks.
import type { RouterConfig } from "../../config/types.ts";
import { BlockIndex } from "../../kv/block-index.ts";
import type { KvIndex, Overlap } from "../../kv/indexer.ts";
import { PrefixMemory } from "../prefix-memory.ts";
import { buildPipeline } from "../pipeline/registry.ts";
import { PipelinePolicy, type CacheSource } from "../pipeline/runner.ts";
import type { PolicyDeps, PolicyFactory } from "../types.ts";

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
  return {
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
          else if (n > o.gpu) o.gpu = n;
        }
      }
      return { overlap, predicted: pred };
    },
    record(worker, hashes, nowMs) {
      predicted?.record(worker, hashes, nowMs);
    },
    // The event index learns of removals and restarts from the engine's own stream (src/kv).
    forget: (worker) => predicted?.forget(worker),
  };
}

export const kv: PolicyFactory = {
  name: "kv",
  create(config: RouterConfig, deps: PolicyDeps = {}) {
    // Without an index (a Router built without one) kv still balances by load and predictions.
    const index = deps.kvIndex ?? new BlockIndex();
    const predicted =
      config.kv.predicted_ttl_ms > 0 ? new PrefixMemory(config.kv.predicted_ttl_ms, config.prefix.max_blocks_per_worker) : null;
    return new PipelinePolicy("kv", buildPipeline(config), kvSource(index, predicted), deps.load);
  },
};
