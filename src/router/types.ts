// The routing seam. A policy is a small pure module: given the request's routing facts and the
// eligible workers' views, it picks one and says why, term by term. Filtering (state, model, role,
// excluded-after-failure) happens before a policy sees the candidates, so every policy gets only
// workers it may choose.
import type { Rng } from "../core/rng.ts";
import type { Worker } from "../cluster/workers.ts";

/** What the router knows about a request when it routes it. */
export interface RouteRequest {
  model: string;
  /** Session id from the configured header, if any. */
  sessionId: string | null;
  /** Approximate prompt length in tokens (exact once tokenization lands), for load terms. */
  promptTokens: number;
  /** Workers that already failed this request (retry goes elsewhere). */
  exclude: ReadonlySet<string>;
}

export interface RouteCtx {
  rng: Rng;
  nowMs: number;
}

/** One candidate's figures as the policy saw them, for /admin/route/explain. */
export interface CandidateExplain {
  worker: string;
  node: string;
  /** Named figures the policy used (in_flight, running, waiting, ring_distance, cost, …). */
  terms: Record<string, number | string | null>;
}

export interface Decision {
  policy: string;
  /** Chosen worker id. */
  chosen: string;
  candidates: CandidateExplain[];
  /** One sentence: why this worker. */
  reason: string;
}

export interface Policy {
  readonly name: string;
  /** `candidates` is non-empty and already filtered. Must not mutate shared state except its own. */
  pick(req: RouteRequest, candidates: readonly Worker[], ctx: RouteCtx): Decision;
}
