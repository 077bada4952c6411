// A request runs as a plan. Aggregated: one leg, routed by router.policy, retried by the lifecycle
// before its commit point. Orchestrated (P/D, src/pd/plan.ts): the plan owns the sequence of legs
// and their retries, and sends each leg through the lifecycle's LegRunner.
//
// One leg protocol: the request layer routes a leg (LegRunner.route: the router, with the leg's
// preset), runs it on the chosen worker (LegRunner.run: same Upstream, ticket attempt and lease,
// commit point and relay as any request) and reports one LegOutcome. The frontend does not know
// P/D exists.
import type { UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import type { Endpoint } from "../protocol/openai.ts";
import type { RouteRequest, RouteResult } from "../router/index.ts";

export interface Leg {
  /** For logs and the worker-side request id ("main", "prefill", "decode", "local"). */
  name: string;
  route: Omit<RouteRequest, "exclude">;
  endpoint: Endpoint;
  /** The exact JSON text sent to the worker. */
  body: string;
  /**
   * `body` parsed, when the builder had it (the frontend parsed the request once): what reads the
   * request's fields (notReplayable, collectable, streamedLeg) uses it instead of parsing `body`
   * again. Never mutated; absent: read from `body`.
   */
  json?: Readonly<Record<string, unknown>>;
  stream: boolean;
  /** Token ids of the prompt when preprocessing produced them (the sim upstream uses them). */
  promptTokens?: ArrayLike<number>;
  maxTokens?: number | null;
}

/** A leg sent to the worker its route chose (the plan routed it and retries it itself). */
export interface PinnedLeg extends Leg {
  worker: { id: string; url: string };
  /** The answer goes to the client (commit point: first token, or the whole 200 answer). */
  toClient: boolean;
  /**
   * Bound on reaching the commit point (a leg not for the client: its whole answer); null = the
   * lifecycle's own bounds. Unlike a routed leg's, this timeout is a failure the plan may retry
   * (issue 13: "prefill fails or times out → retry"), never a final 504.
   */
  commitTimeoutMs: number | null;
}

/** Why a leg failed: the upstream's failure kinds, or no worker to send it to (herd's 503). */
export type LegFailure = UpstreamErrorKind | "no_worker";

/**
 * How one leg ended: the one result type of a leg, from the attempt code to the P/D orchestrator.
 * `done`: a leg not for the client, read whole. `committed`: an answer from this leg went to the
 * client (past the commit point, or the engine's own refusal relayed as is); `answer` is the
 * runner's (the lifecycle's Answer inside the request layer, null to a plan, a response in tests).
 * `failed`: before the commit point (refused, 5xx, reset, timeout, or a stream whose first event is
 * an error event — vLLM's kv_load_failure_policy fail answers 200 and then `data: {"error": …}`).
 * `aborted`: the request is over (client gone, shutdown).
 */
export type LegOutcome<A = unknown> =
  | { kind: "done"; text: string }
  | { kind: "committed"; answer: A }
  | { kind: "failed"; reason: LegFailure; message: string; status: number | null }
  | { kind: "aborted" };

export interface LegRunner {
  /**
   * Choose a leg's worker: the router's decision for `req` (its `leg` preset, role, exclusions),
   * with every candidate's terms. Throws HerdError 404/503 when no worker fits. `dryRun` (a
   * look-ahead) and a dry-run runner (explain) answer with the router's explain: the same decision,
   * no state changed.
   */
  route(req: RouteRequest, dryRun?: boolean): RouteResult;
  /** Send a leg to the worker chosen for it; resolves with how it ended (never rejects). */
  run(leg: PinnedLeg, signal: AbortSignal): Promise<LegOutcome>;
}

export type Plan =
  /** One leg, routed and retried by the lifecycle; its answer is the client's. */
  | { kind: "routed"; leg: Leg }
  /**
   * The plan sequences its legs through `runner`. Exactly one answer reaches the client: the first
   * leg that answers it, else herd's error built from how the plan ended.
   */
  | { kind: "orchestrated"; run(runner: LegRunner, requestId: string, signal: AbortSignal): Promise<LegOutcome> };

/** What a plan builder gets: the checked request as the frontend (or simulate) prepared it. */
export interface PlanInput {
  endpoint: Endpoint;
  body: string;
  stream: boolean;
  route: Omit<RouteRequest, "exclude">;
  promptTokens?: ArrayLike<number>;
  maxTokens?: number | null;
  /** The parsed request body, JSON.parse(body) when body is not empty (a P/D plan rewrites it per leg, in copies). */
  json: Record<string, unknown>;
}

export type PlanBuilder = (input: PlanInput) => Plan;

/** The whole request as one leg on one (aggregated) worker. */
export const aggregatedPlan: PlanBuilder = (input) => ({
  kind: "routed",
  leg: {
    name: "main",
    route: input.route,
    endpoint: input.endpoint,
    body: input.body,
    ...(input.body !== "" ? { json: input.json } : {}),
    stream: input.stream,
    ...(input.promptTokens ? { promptTokens: input.promptTokens } : {}),
    ...(input.maxTokens !== undefined ? { maxTokens: input.maxTokens } : {}),
  },
});
