// The step-cost model of the simulated engine (docs/references.md#timing-B.5, "recommended default
// parameter set", Qwen3-8B BF16 on one H100-80GB under vLLM V1):
//
//   step_ms = t_step + max(t_weights, c_lin · T) + c_pair · P + c_kv · K
//
// T = tokens computed in the step (new prefill tokens + one per decoding sequence), P = attention token
// pairs of the prefill chunks (a chunk of n new tokens after p cached ones: n·p + n²/2), K = context
// tokens read by the decoding sequences. Pure: no clock, no state.

export interface CostParams {
  /** Per-step CPU/launch overhead (ms). 7.38 ms measured TPOT − 5.9 ms weight read (GPUStack perf-lab, docs/references.md#timing-B.5). */
  stepMs: number;
  /** Floor of a step: reading the BF16 weights once, 16.4 GB at 2.8 TB/s (ms) (docs/references.md#timing-B.5). */
  weightsMs: number;
  /** Matmul time per token in the step (ms): 13.9 GFLOP at 600 TFLOP/s. */
  linearMsPerToken: number;
  /** Attention time per prefill (query, key) pair (ms): 589,824 FLOP at 500 TFLOP/s. */
  pairMs: number;
  /** Decode KV read per context token (ms): 147,456 B at 2.8 TB/s. */
  kvReadMsPerToken: number;
  /** API-server time per request before it reaches the scheduler (tokenize, template, HTTP) (ms). */
  requestMs: number;
}

export const DEFAULT_COST: CostParams = {
  stepMs: 1.5,
  weightsMs: 5.9,
  linearMsPerToken: 0.0232,
  pairMs: 1.18e-6,
  kvReadMsPerToken: 5.3e-5,
  requestMs: 10,
};

export const ZERO_COST: CostParams = { stepMs: 0, weightsMs: 0, linearMsPerToken: 0, pairMs: 0, kvReadMsPerToken: 0, requestMs: 0 };

export interface StepWork {
  /** Tokens computed in the step (prefill chunk tokens + decode tokens). */
  tokens: number;
  /** Attention pairs of the prefill chunks. */
  prefillPairs: number;
  /** Context tokens read by the decoding sequences. */
  decodeContextTokens: number;
}

export function stepCostMs(c: CostParams, w: StepWork): number {
  if (w.tokens === 0) return 0;
  return c.stepMs + Math.max(c.weightsMs, c.linearMsPerToken * w.tokens) + c.pairMs * w.prefillPairs + c.kvReadMsPerToken * w.decodeContextTokens;
}

/** Attention pairs for a prefill chunk of `n` new tokens after `p` already-computed tokens. */
export function chunkPairs(p: number, n: number): number {
  return n * p + (n * n) / 2;
}
