// A request runs as a plan of legs. Today every request is one aggregated leg. P/D disaggregation
// (next issue) is a two-leg plan: a prefill leg run to completion on a prefill worker (its answer
// carries kv_transfer_params), then a decode leg built from that answer, streamed to the client.
// The lifecycle runs any plan the same way (route → attempt → retry per leg; only the last leg
// commits to the client), so the orchestrator plugs in here and the frontend does not change.
import type { Endpoint } from "../protocol/openai.ts";
import type { RouteRequest } from "../router/index.ts";

export interface Leg {
  /** For logs and the worker-side request id ("main", "prefill", "decode"). */
  name: string;
  route: Omit<RouteRequest, "exclude">;
  endpoint: Endpoint;
  /** The exact JSON text sent to the worker. */
  body: string;
  stream: boolean;
  /** Token ids of the prompt when preprocessing produced them (the sim upstream uses them). */
  promptTokens?: ArrayLike<number>;
  maxTokens?: number | null;
}

export interface Plan {
  first: Leg;
  /**
   * The leg after `leg`, given its complete answer (JSON text); null when `leg` is the last.
   * A leg with a successor is never streamed to the client: it runs to completion first.
   */
  next(leg: Leg, answer: string): Leg | null;
  /** Whether `leg` has a successor (known before it runs, so it is not relayed to the client). */
  hasNext(leg: Leg): boolean;
  /**
   * An orchestrated plan (P/D, src/pd/plan.ts) chooses each leg's worker and its retries itself:
   * the lifecycle then runs `orchestrate` instead of first/next, sending each leg through `runner`
   * (same Upstream, ticket, commit point and relay). Resolves with how the plan ended; when no leg
   * answered the client, the lifecycle turns that end into herd's error.
   */
  orchestrate?(runner: LegRunner, requestId: string, signal: AbortSignal): Promise<PinnedEnd>;
}

/** A leg sent to the worker the plan chose (no routing: the plan picked it and retries itself). */
export interface PinnedLeg extends Leg {
  workerId: string;
  workerUrl: string;
  /** The answer goes to the client (commit point: first token, or the whole 200 answer). */
  toClient: boolean;
  /**
   * Bound on reaching the commit point (a leg not for the client: its whole answer); null = the
   * lifecycle's own bounds. Unlike a routed leg's, this timeout is a failure the plan may retry
   * (issue 13: "prefill fails or times out → retry"), never a final 504.
   */
  commitTimeoutMs: number | null;
}

/**
 * How a pinned leg ended. `failed`: before the commit point (refused, 5xx, reset, timeout, or a
 * stream whose first event is an error event — vLLM's kv_load_failure_policy fail answers 200 and
 * then `data: {"error": …}`). `aborted`: the request is over (client gone, shutdown, or an answer
 * already went to the client from a leg that was not meant to answer it, e.g. an engine's 400).
 */
export type PinnedEnd =
  | { kind: "done"; text: string }
  | { kind: "committed" }
  | { kind: "failed"; reason: string; status: number | null }
  | { kind: "aborted" };

export interface LegRunner {
  run(leg: PinnedLeg, signal: AbortSignal, cb: (end: PinnedEnd) => void): void;
}

/** What a plan builder gets: the checked request as the frontend (or simulate) prepared it. */
export interface PlanInput {
  endpoint: Endpoint;
  body: string;
  stream: boolean;
  route: Omit<RouteRequest, "exclude">;
  promptTokens?: ArrayLike<number>;
  maxTokens?: number | null;
  /** The parsed request body (a P/D plan rewrites it per leg). */
  json: Record<string, unknown>;
}

export type PlanBuilder = (input: PlanInput) => Plan;

/** Today's plan: the whole request as one leg on one (aggregated) worker. */
export const aggregatedPlan: PlanBuilder = (input) => ({
  first: {
    name: "main",
    route: input.route,
    endpoint: input.endpoint,
    body: input.body,
    stream: input.stream,
    ...(input.promptTokens ? { promptTokens: input.promptTokens } : {}),
    ...(input.maxTokens !== undefined ? { maxTokens: input.maxTokens } : {}),
  },
  next: () => null,
  hasNext: () => false,
});
