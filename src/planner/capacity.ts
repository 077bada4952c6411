// SLA mode's capacity model (pure): what one engine sustains at the SLO, from the one engine timing
// model (src/engine/sim/cost.ts: step_ms + max(weights_ms, token_ms·T) + pair_ms·P + kv_token_ms·K,
// the figures `herd simulate --calibrate` fits to a real engine). Dynamo's throughput-based SLA
// planner reads the same two answers from its profiling sweep (ai-dynamo/dynamo
// docs/pages/design-docs/planner-design.md "Performance Interpolation"): prefill throughput per
// engine at the ISL, decode throughput at the largest concurrency whose ITL meets the target at the
// context length. herd computes them from the step cost instead of interpolating a sweep.
//
// Prefill, for prompts of n uncached tokens (a prefill engine, or an aggregated one's prompts):
//   idle TTFT     = request_ms + Σ over the chunks of n (at most B = max_num_batched_tokens each) of
//                   step_ms + max(weights_ms, token_ms·c) + pair_ms·(c·p + c²/2)
//   full steps    : B tokens per step, n/2 attention pairs per token (a prompt's pairs are n²/2 however
//                   it is chunked), so the engine's most tokens/s = B / (step_ms + max(weights_ms,
//                   token_ms·B) + pair_ms·B·n/2)
//   queueing      : Poisson arrivals, each prompt S = n / most tokens/s of engine time, FCFS
//                   (M/D/1: mean wait = ρ·S / (2(1 − ρ)), ρ = load / most tokens/s); plus the step
//                   batch: prompts that arrived during one step share the next and all finish at its
//                   end instead of in order, which costs each half its batch-mates' work (about
//                   ρ/2 × its time in the engine), for the prompts that fit a step together (the
//                   (1 − n/B)² share; the scheduler's chunk sharing of long prompts is left to the
//                   online correction: test/planner/slo-capacity.test.ts holds the model to the
//                   scheduler within 12%)
//   capacity      = ρ × most tokens/s at the largest ρ whose mean TTFT meets the target (bisection:
//                   the mean TTFT rises with ρ)
// Decode, at a context of C tokens per sequence (ISL + OSL/2 on average over a sequence's life):
//   ITL(b)        = step_ms + max(weights_ms, token_ms·b) + kv_token_ms·b·C     (b sequences decoding)
//   best batch b* = the largest b ≤ min(max_num_seqs, KV tokens / C) with ITL(b) ≤ target
//   capacity      = b* / ITL(b*) tokens per ms
// ITL is linear in b (past the weight-read floor), so a batch that varies around b* still averages
// ITL(b*): the mean ITL meets the target at a mean concurrency of b* (Little: b = λ·OSL·ITL).
import type { CostParams } from "../engine/sim/cost.ts";
import { DEFAULT_COST, chunkPairs } from "../engine/sim/cost.ts";

/** One engine for the capacity model: its step cost and the scheduler limits that bound a step. */
export interface EngineFigures {
  cost: CostParams;
  /** Tokens per step (vLLM --max-num-batched-tokens). */
  maxNumBatchedTokens: number;
  /** Sequences per step (vLLM --max-num-seqs). */
  maxNumSeqs: number;
  /** KV cache tokens (blocks × block size): bounds the decode batch at a context length. */
  kvTokens: number;
}

export interface PrefillCapacity {
  /** Uncached prompt tokens/s one engine sustains with the mean TTFT at the target (0 = unreachable). */
  tokensPerS: number;
  /** Its most tokens/s, saturated. */
  maxTokensPerS: number;
  /** Mean TTFT of a lone prompt (no queue). */
  idleTtftMs: number;
  /** Share of the saturated throughput the target allows. */
  utilization: number;
  /** False when even a lone prompt misses the target (no engine count meets it). */
  feasible: boolean;
}

export interface DecodeCapacity {
  tokensPerS: number;
  /** Sequences decoding together at the target (b*; 0 = unreachable). */
  batch: number;
  /** ITL at that batch. */
  itlMs: number;
  feasible: boolean;
}

/**
 * The capacity model's engine when nothing better is known (no planner.slo.profile, not a sim
 * engine): the sim's step cost (Qwen3-8B BF16 on one H100 under vLLM V1, cost.ts), vLLM's default
 * step budget and sequence limit, the sim's KV cache (24,700 blocks of 16 tokens).
 */
export const DEFAULT_FIGURES: EngineFigures = { cost: DEFAULT_COST, maxNumBatchedTokens: 8192, maxNumSeqs: 256, kvTokens: 24_700 * 16 };

/** Mean TTFT of one prompt of `isl` uncached tokens on an idle engine (ms). */
export function idleTtftMs(f: EngineFigures, isl: number): number {
  const c = f.cost;
  const b = Math.max(1, f.maxNumBatchedTokens);
  let ms = c.requestMs;
  for (let p = 0, left = Math.max(1, Math.round(isl)); left > 0; ) {
    const n = Math.min(b, left);
    ms += c.stepMs + Math.max(c.weightsMs, c.linearMsPerToken * n) + c.pairMs * chunkPairs(p, n);
    p += n;
    left -= n;
  }
  return ms;
}

/** Most prompt tokens/s of one engine with every step full (prompts of `isl` tokens). */
export function maxPrefillTokensPerS(f: EngineFigures, isl: number): number {
  const c = f.cost;
  const b = Math.max(1, f.maxNumBatchedTokens);
  const stepMs = c.stepMs + Math.max(c.weightsMs, c.linearMsPerToken * b) + c.pairMs * b * (Math.max(1, isl) / 2);
  return stepMs > 0 ? (b / stepMs) * 1000 : Infinity;
}

/** The model's mean TTFT (ms) of prompts of `isl` tokens arriving at `tokensPerS` on one engine (Infinity at or past saturation). */
export function expectedTtftMs(f: EngineFigures, isl: number, tokensPerS: number): number {
  const n = Math.max(1, isl);
  const most = maxPrefillTokensPerS(f, n);
  const rho = Math.max(0, Number.isFinite(tokensPerS) ? tokensPerS : 0) / most;
  if (rho >= 1) return Infinity;
  const serviceMs = (n / most) * 1000;
  const idle = idleTtftMs(f, n);
  const inEngineMs = idle - f.cost.requestMs + (rho * serviceMs) / (2 * (1 - rho));
  const batched = Math.max(0, 1 - n / Math.max(1, f.maxNumBatchedTokens)) ** 2;
  return f.cost.requestMs + inEngineMs * (1 + (rho / 2) * batched);
}

/** Prompt tokens/s one engine sustains with the mean TTFT at `ttftMs` (see the header). */
export function prefillCapacity(f: EngineFigures, isl: number, ttftMs: number): PrefillCapacity {
  const n = Math.max(1, isl);
  const most = maxPrefillTokensPerS(f, n);
  const idle = idleTtftMs(f, n);
  if (!(ttftMs > idle)) return { tokensPerS: 0, maxTokensPerS: most, idleTtftMs: idle, utilization: 0, feasible: false };
  let lo = 0;
  let hi = 1;
  for (let i = 0; i < 50; i++) {
    const mid = (lo + hi) / 2;
    if (expectedTtftMs(f, n, mid * most) <= ttftMs) lo = mid;
    else hi = mid;
  }
  return { tokensPerS: lo * most, maxTokensPerS: most, idleTtftMs: idle, utilization: lo, feasible: true };
}

/** ITL (ms) of one decode step with `batch` sequences at `contextTokens` each. */
export function itlMs(f: EngineFigures, batch: number, contextTokens: number): number {
  const c = f.cost;
  const b = Math.max(1, batch);
  return c.stepMs + Math.max(c.weightsMs, c.linearMsPerToken * b) + c.kvReadMsPerToken * b * Math.max(0, contextTokens);
}

/** Decode tokens/s one engine sustains at the largest batch whose ITL meets `targetItlMs` (see the header). */
export function decodeCapacity(f: EngineFigures, contextTokens: number, targetItlMs: number): DecodeCapacity {
  const ctx = Math.max(1, contextTokens);
  const limit = Math.max(0, Math.min(f.maxNumSeqs, Math.floor(f.kvTokens / ctx)));
  // ITL(b) is non-decreasing in b: bisect for the largest batch within the target.
  let lo = 0;
  let hi = limit;
  while (lo < hi) {
    const mid = Math.ceil((lo + hi) / 2);
    if (itlMs(f, mid, ctx) <= targetItlMs) lo = mid;
    else hi = mid - 1;
  }
  if (lo === 0) return { tokensPerS: 0, batch: 0, itlMs: itlMs(f, 1, ctx), feasible: false };
  const itl = itlMs(f, lo, ctx);
  return { tokensPerS: (lo / itl) * 1000, batch: lo, itlMs: itl, feasible: true };
}
