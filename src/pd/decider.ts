// Conditional disaggregation (llm-d's prefix-based P/D decider: non-cached tokens ≥ a threshold;
// Dynamo's conditional disaggregation): a request goes through the prefill pool only when that pays.
// Pure: the orchestrator passes what the router already knows.
//
//   - no prefill worker ready                      → local (the decode/aggregated worker prefills)
//   - uncached prompt tokens < min_prefill_tokens  → local: the transfer would cost more than it saves
//   - every prefill worker's queue ≥ queue bound   → local: waiting for a prefill slot is slower
//   - otherwise                                    → disaggregate
export type DisaggReason = "disaggregated" | "no_prefill_worker" | "short_uncached_prompt" | "prefill_saturated";

export interface DisaggInput {
  /** Prompt tokens the best decode candidate does not hold (prompt − its cached overlap). */
  uncachedTokens: number;
  /** Requests waiting (booked, no first token yet) on each ready prefill worker. */
  prefillQueue: readonly number[];
}

export interface DisaggConfig {
  min_prefill_tokens: number;
  /** A prefill worker with this many requests waiting counts as saturated. */
  prefill_queue_max: number;
}

export interface DisaggDecision {
  disaggregate: boolean;
  reason: DisaggReason;
  /** The figures the decision read, for explain. */
  terms: { uncached_tokens: number; min_prefill_tokens: number; least_prefill_queue: number | null; prefill_queue_max: number };
}

export function decideDisagg(input: DisaggInput, cfg: DisaggConfig): DisaggDecision {
  const least = input.prefillQueue.length > 0 ? Math.min(...input.prefillQueue) : null;
  const terms = { uncached_tokens: input.uncachedTokens, min_prefill_tokens: cfg.min_prefill_tokens, least_prefill_queue: least, prefill_queue_max: cfg.prefill_queue_max };
  const reason: DisaggReason =
    least === null ? "no_prefill_worker"
    : input.uncachedTokens < cfg.min_prefill_tokens ? "short_uncached_prompt"
    : least >= cfg.prefill_queue_max ? "prefill_saturated"
    : "disaggregated";
  return { disaggregate: reason === "disaggregated", reason, terms };
}
