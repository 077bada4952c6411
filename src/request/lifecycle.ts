// One request, run as a plan (plan.ts): a routed leg is route → attempt → (retry) → commit → relay;
// an orchestrated plan (P/D) sends each of its legs through the same attempt code (orchestrated.ts).
// Every attempt ends in one LegOutcome. The same code serves the HTTP frontend (HttpUpstream) and
// `herd simulate` (SimUpstream on the virtual clock).
//
// Commit point: nothing reaches the client until the worker answered 200 AND (for a stream)
// delivered its first body chunk. A failure before that (refused, reset, 5xx/429, EOF) may be
// retried once on another eligible worker, within router.allowRetry (attempts and budget); after
// it, never (the client already holds part of an answer): it becomes an OpenAI error event
// `data: {"error": …}` and the stream closes — never a bare close, which the openai client would
// take for a normal end (docs/references.md#reliability-1.1). A timeout before the commit point is a 504 and
// is not retried (a slow prefill or decode would just be repeated elsewhere). Non-streaming bounds:
// bounds.ts. Text sent to the client is herd's; the runtime's error text is only logged. A
// non-streamed chat request migration can replay runs as a collected stream (collect.ts): its
// commit point is internal, and the client gets one JSON answer or a clean error.
import type { Clock } from "../core/clock.ts";
import { HerdError, invariant } from "../core/errors.ts";
import { NOOP_SPAN } from "../core/trace.ts";
import type { Logger } from "../core/log.ts";
import type { RejectReason, UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import type { Failure, FailureKind, Lease, Router } from "../router/index.ts";
import { nonStreamingHeadersBoundMs } from "./bounds.ts";
import type { Leg, LegOutcome, Plan } from "./plan.ts";
import { clientText, type RelaySource } from "./relay.ts";
import { AbortCause, type Ticket } from "./ticket.ts";
import { runOrchestrated } from "./orchestrated.ts";
import { attemptSpan, routeSpan } from "./spans.ts";
import type { LegRequest, Upstream } from "./upstream.ts";
import type { MigrationConfig } from "./migrate.ts";
import { failed, onReply, type AttemptState } from "./attempt-read.ts";
import { collectable, streamedLeg, worthCollecting } from "./collect.ts";

export interface LifecycleDeps<C> {
  router: Router;
  upstream: Upstream<C>;
  clock: Clock;
  log: Logger;
  firstTokenTimeoutMs: number;
  /** Longest silence of an engine after its first token, and of a reader holding a chunk. */
  idleTimeoutMs: number;
  /** Request migration of chat streams (migrate.ts); absent or limit 0 = off. */
  migration?: MigrationConfig;
}

/** What the client gets. The ticket is released when the answer is final, or at the end of `body`. */
export type Answer<C> =
  | { kind: "stream"; workerId: string; contentType: string; sse: boolean; body: RelaySource<C> }
  | { kind: "whole"; workerId: string; status: number; contentType: string; body: C | string }
  | { kind: "error"; error: HerdError };

/** Non-streaming answers up to this size (declared by Content-Length) are read whole; larger ones are piped. */
export const SMALL_ANSWER_BYTES = 1 << 20;

/** How an attempt ended: `committed` carries the client's answer (stream, whole, or herd's final error). */
export type AttemptEnd<C> = LegOutcome<Answer<C>>;

export interface LastFailure {
  reason: UpstreamErrorKind;
  message: string;
  worker: string;
}

/** Run a request's plan; `done` gets the answer exactly once (possibly synchronously). */
export function runRequest<C>(d: LifecycleDeps<C>, t: Ticket, plan: Plan, requestId: string, done: (a: Answer<C>) => void): void {
  if (plan.kind === "orchestrated") return runOrchestrated(d, t, plan, requestId, done);
  runRouted(d, t, plan.leg, requestId, done);
}

/** A routed leg: route, attempt, retry on another worker within router.allowRetry, answer the client. */
function runRouted<C>(d: LifecycleDeps<C>, t: Ticket, asked: Leg, requestId: string, done: (a: Answer<C>) => void): void {
  const exclude = new Set<string>();
  // A non-streamed chat request runs as a stream herd assembles, so it can migrate (collect.ts).
  const collect = d.migration !== undefined && d.upstream.format.sseBytes === true && worthCollecting(asked, d.migration);
  const leg = collect ? streamedLeg(asked) : asked;
  let lastFailure: LastFailure | null = null;
  let reruns = 0;
  const attempt = (n: number): void => {
    let routed;
    try {
      // route() and book() in one call, so no other request can slip between them. With block
      // hashes in the route the lease also counts the prompt's blocks active on the worker.
      // (tracing off: no span closures, bench/frontend-allocs.ts counts them per request)
      routed = t.span === NOOP_SPAN ? d.router.routeAndBook({ ...leg.route, exclude }) : routeSpan(t.span, () => ({ "herd.leg": leg.name, "herd.attempt": n }), () => d.router.routeAndBook({ ...leg.route, exclude }));
    } catch (e) {
      // No (other) worker: after a failed attempt report that failure, it is the real cause.
      return done(lastFailure ? upstreamFailure(t, lastFailure) : refusal(t, e));
    }
    const { worker, lease } = routed;
    t.decision = routed.decision;
    const ctx: AttemptCtx<C> = { d, t, leg, toClient: true, id: legId(requestId, leg, n), requestId };
    if (collect) ctx.collect = collect;
    attemptOn(ctx, worker.id, worker.url, lease, routed.decision.predictedCachedTokens ?? null, (r) => {
      if (r.kind === "committed") return done(r.answer);
      invariant(r.kind === "failed", `routed leg ${leg.name} ended ${r.kind}: a routed leg answers the client`);
      const reason = r.reason as UpstreamErrorKind; // an attempt never fails for want of a worker
      t.upstreamFailed(worker.id, reason);
      lastFailure = { reason, message: r.message, worker: worker.id };
      d.log.warn("upstream failed before first byte", { worker: worker.id, leg: leg.name, reason, err: r.message, attempt: n });
      if (t.clientSignal?.aborted) return done(upstreamFailure(t, lastFailure));
      // A non-streamed chat request migration covers whose engine went away before the answer is
      // re-run whole, like a migration: up to migration_limit times, outside the retry budget (that
      // guards overloaded engines; this one is gone). Without it a kill -9 under many short
      // requests (not collected, collect.ts) answered most of them 502 (budget spent).
      const rerun = ENGINE_GONE.has(reason) && reruns < (d.migration?.limit ?? 0) && collectable(asked);
      if (rerun) reruns++;
      else if (!d.router.allowRetry(n + 1, failureOf(reason, r.status ?? undefined))) return done(upstreamFailure(t, lastFailure));
      t.retry(reason);
      exclude.add(worker.id);
      attempt(n + 1);
    });
  };
  attempt(0);
}

/** Failures that say the engine went away (killed, stopped, unreachable), not that it is overloaded. */
const ENGINE_GONE: ReadonlySet<UpstreamErrorKind> = new Set<UpstreamErrorKind>(["worker_down", "drain", "connect", "reset", "eof", "peer_unreachable"]);

export const legId = (requestId: string, leg: Leg, n: number) => (leg.name === "main" ? `${requestId}.${n}` : `${requestId}.${leg.name}.${n}`);

const REFUSAL_REASON: Record<number, RejectReason> = { 400: "invalid", 404: "not_found", 413: "too_large", 503: "no_worker" };

/** herd's own answer before any worker was tried (the router found none): released here. */
export function refusal<C>(t: Ticket, e: unknown): Answer<C> {
  const error = e instanceof HerdError ? e : new HerdError(500, "server_error", "internal error", "internal_error");
  t.release({ kind: "refused", status: error.status, reason: REFUSAL_REASON[error.status] ?? null });
  return { kind: "error", error };
}

export function upstreamFailure<C>(t: Ticket, f: LastFailure): Answer<C> {
  // herd's words only: an "HTTP 503" herd saw, never the runtime's or the engine's error text.
  const what = f.reason === "status_5xx" ? /^HTTP \d+/.exec(f.message)?.[0] ?? clientText(f.reason) : clientText(f.reason);
  const error = new HerdError(502, "server_error", `upstream worker ${f.worker} failed: ${what}`, `upstream_${f.reason}`);
  t.release({ kind: "upstream_failed", status: 502, reason: f.reason });
  return { kind: "error", error };
}

export interface AttemptCtx<C> {
  d: LifecycleDeps<C>;
  /**
   * A pinned leg of an orchestrated plan: its own commit bound, timeouts are failures its plan
   * retries, and `signal` (the plan's for this leg) cancels it.
   */
  pinned?: { commitTimeoutMs: number | null; signal: AbortSignal };
  t: Ticket;
  leg: Leg;
  /** This leg answers the client; a leg that does not is read whole (`done`). */
  toClient: boolean;
  id: string;
  requestId: string;
  /** The client asked for one JSON answer; herd streams from the engine and assembles it (collect.ts). */
  collect?: boolean;
}

/** One attempt of one leg on one worker; `cb` is called exactly once. */
export function attemptOn<C>(x: AttemptCtx<C>, workerId: string, workerUrl: string, lease: Lease, predicted: number | null, cb: (r: AttemptEnd<C>) => void): void {
  const { d, t, leg } = x;
  const ac = t.beginAttempt(workerId, lease, predicted, x.pinned !== undefined, leg);
  const plan = x.pinned?.signal;
  if (plan) {
    // The client leaving reaches the attempt as the client's cause (a close, not an upstream failure).
    const stop = () => ac.abort(t.clientSignal?.aborted ? new AbortCause("client", "client disconnected") : new AbortCause("plan", "the plan cancelled this leg"));
    if (plan.aborted) stop();
    else plan.addEventListener("abort", stop, { once: true });
  }
  const startedAtMs = d.clock.now();
  // Before the commit point a stream must show its first chunk within first_token_timeout_ms; a
  // non-streaming answer carries its tokens in the final response, so its headers get the
  // generation-sized bound of bounds.ts.
  // A collected leg (collect.ts) is a stream to the engine but keeps the client's non-streaming bound.
  const streamBound = leg.stream && !x.collect;
  const boundMs = x.pinned?.commitTimeoutMs ?? (streamBound ? d.firstTokenTimeoutMs : nonStreamingHeadersBoundMs(d.firstTokenTimeoutMs, leg.maxTokens ?? null));
  const what = streamBound ? `no first token within ${boundMs} ms` : `no response within ${boundMs} ms (non-streaming bound)`;
  const headersTimer = d.clock.setTimer(boundMs, () => ac.abort(new AbortCause("first_token_timeout", what)));
  const span = attemptSpan(t.span, leg, x.id, workerId);
  const s: AttemptState<C> = { x, workerId, ac, headersTimer, startedAtMs, boundMs, settled: false, cb, span };
  const traceparent = span.traceparent; // the engine's (or the peer node's) spans continue this attempt's
  // Optional fields assigned, not spread from a `{}` each (one object fewer per absent field).
  const req: LegRequest = { id: x.id, requestId: x.requestId, workerId, workerUrl, endpoint: leg.endpoint, body: leg.body, stream: leg.stream, maxTokens: leg.maxTokens ?? null };
  if (leg.promptTokens) req.promptTokens = leg.promptTokens;
  if (traceparent) req.traceparent = traceparent;
  d.upstream.send(req, ac.signal, (r) => ("error" in r ? failed(s, r.error, r.kind ?? "connect") : onReply(s, r)));
}

/** The router's view of a failure before the commit point (nothing has reached the client yet). */
function failureOf(reason: UpstreamErrorKind, status?: number): Failure {
  const kind: FailureKind = reason === "status_5xx" ? "status" : reason === "first_token_timeout" ? "timeout" : "connect";
  const dead = reason === "connect" || reason === "peer_unreachable" || reason === "head_timeout"; // ejects the target (router/evidence.ts)
  return status === undefined ? { kind, firstByteSent: false, dead } : { kind, status, firstByteSent: false, dead };
}
