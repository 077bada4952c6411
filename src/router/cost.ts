// The KV-aware cost, written once (Dynamo's form, docs/references.md#routers-1.1), and the two ways of choosing by
// cost (docs/references.md#routers-1.2). Pure functions: explain output and policies call the same code, so a decision can
// always be re-derived from its printed terms.
//
//   credit_blocks   = gpu·overlap_gpu + cpu·overlap_cpu + disk·overlap_disk
//   raw_prefill     = (active_prefill_tokens + request_tokens) / block_size
//   prefill_blocks  = (raw_prefill − credit_blocks)⁺
//   decode_blocks   = active_blocks + new_blocks          (blocks this request would add to the worker;
//                     the scorer fills both per router.kv.decode_load_model, pipeline/scorers.ts)
//   cost            = prefill_load_scale · prefill_blocks + decode_blocks
//
// The media are credited in tiers (kv/indexer.ts Overlap): overlap_gpu is the GPU prefix hit,
// overlap_cpu the blocks after it that the CPU tier continues with, overlap_disk the blocks after
// those from disk. A block held on GPU and also on CPU counts once, at the GPU's credit.
import type { Rng } from "../core/rng.ts";
import type { Overlap } from "../kv/indexer.ts";
import { argminRandomTie } from "./load.ts";

export interface CostKnobs {
  prefillLoadScale: number;
  credit: Overlap;
}

export interface CostInputs {
  /** Prompt tokens of this request. */
  requestTokens: number;
  blockSize: number;
  /** Leading prompt blocks the worker holds, per medium. */
  overlap: Overlap;
  /** Prompt tokens of requests on the worker that have not had their first token. */
  activePrefillTokens: number;
  /** KV blocks of requests active on the worker. */
  activeBlocks: number;
  /** Blocks this request would add to the worker's active set (its blocks not already active there). */
  newBlocks: number;
}

export interface CostTerms {
  credit_blocks: number;
  raw_prefill_blocks: number;
  prefill_blocks: number;
  decode_blocks: number;
  cost: number;
}

/** Credited blocks for an overlap, media in tiers (see the header). */
export function creditBlocks(o: Overlap, credit: Overlap): number {
  return credit.gpu * o.gpu + credit.cpu * o.cpu + credit.disk * o.disk;
}

export function kvCost(inp: CostInputs, knobs: CostKnobs): CostTerms {
  const credit = creditBlocks(inp.overlap, knobs.credit);
  const raw = (inp.activePrefillTokens + inp.requestTokens) / inp.blockSize;
  const prefill = Math.max(0, raw - credit);
  const decode = inp.activeBlocks + inp.newBlocks;
  return {
    credit_blocks: credit,
    raw_prefill_blocks: raw,
    prefill_blocks: prefill,
    decode_blocks: decode,
    cost: knobs.prefillLoadScale * prefill + decode,
  };
}

/**
 * Choose an index by cost. temperature ≤ 0: the cheapest, exact ties uniformly at random.
 * temperature > 0: Dynamo's softmax over min-max normalised cost,
 * p_i ∝ exp(−(c_i − c_min) / ((c_max − c_min) · T)); all costs equal → uniform. T is relative to the
 * cost range, so T = 1 gives the most expensive worker e⁻¹ of the cheapest one's weight.
 */
export function pickByCost(costs: readonly number[], temperature: number, rng: Rng): number {
  if (costs.length === 0) throw new RangeError("pickByCost: no costs");
  if (!(temperature > 0)) return argminRandomTie(costs.map((c) => [c]), rng);
  const p = softmaxWeights(costs, temperature);
  let u = rng.float();
  for (let i = 0; i < p.length; i++) {
    u -= p[i]!;
    if (u < 0) return i;
  }
  return p.length - 1;
}

/** The sampling probabilities pickByCost uses for temperature > 0 (sum 1). */
export function softmaxWeights(costs: readonly number[], temperature: number): number[] {
  let min = Infinity;
  let max = -Infinity;
  for (const c of costs) {
    if (c < min) min = c;
    if (c > max) max = c;
  }
  const range = max - min;
  if (!(range > 0)) return costs.map(() => 1 / costs.length);
  const w = costs.map((c) => Math.exp(-(c - min) / (range * temperature)));
  const sum = w.reduce((a, b) => a + b, 0);
  return w.map((x) => x / sum);
}
