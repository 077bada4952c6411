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
import { wallClockMs, type Clock, type TimerHandle } from "../core/clock.ts";
import { HerdError, errorMessage, invariant } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Span } from "../core/trace.ts";
import type { RejectReason, UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import type { Failure, FailureKind, Lease, Router } from "../router/index.ts";
import { nonStreamingHeadersBoundMs } from "./bounds.ts";
import type { Leg, LegOutcome, Plan } from "./plan.ts";
import { clientText, relay, type RelayEnd, type RelaySource } from "./relay.ts";
import { AbortCause, type Ticket } from "./ticket.ts";
import { runOrchestrated } from "./orchestrated.ts";
import { attemptSpan, routeSpan } from "./spans.ts";
import type { ChunkSource, LegReply, Upstream } from "./upstream.ts";
import { MigratingSource, notReplayable, type MigrationConfig } from "./migrate.ts";
import { ChatAssembler, collectable, streamedLeg, worthCollecting } from "./collect.ts";

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
type AttemptEnd<C> = LegOutcome<Answer<C>>;

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
      routed = routeSpan(t.span, () => ({ "herd.leg": leg.name, "herd.attempt": n }), () => d.router.routeAndBook({ ...leg.route, exclude }));
    } catch (e) {
      // No (other) worker: after a failed attempt report that failure, it is the real cause.
      return done(lastFailure ? upstreamFailure(t, lastFailure) : refusal(t, e));
    }
    const { worker, lease } = routed;
    t.decision = routed.decision;
    const ctx: AttemptCtx<C> = { d, t, leg, toClient: true, id: legId(requestId, leg, n), requestId, ...(collect ? { collect } : {}) };
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
  d.upstream.send(
    { id: x.id, requestId: x.requestId, workerId, workerUrl, endpoint: leg.endpoint, body: leg.body, stream: leg.stream,
      ...(leg.promptTokens ? { promptTokens: leg.promptTokens } : {}), maxTokens: leg.maxTokens ?? null, ...(traceparent ? { traceparent } : {}) },
    ac.signal,
    (r) => ("error" in r ? failed(s, r.error, r.kind ?? "connect") : onReply(s, r)),
  );
}

interface AttemptState<C> {
  x: AttemptCtx<C>;
  workerId: string;
  ac: AbortController;
  headersTimer: TimerHandle;
  startedAtMs: number;
  /** The bound until the commit point (a collected leg's first token keeps it). */
  boundMs: number;
  settled: boolean;
  cb: (r: AttemptEnd<C>) => void;
  /** This attempt's span: ends when it settles, or with the relay for a committed stream. */
  span: Span;
}

function settle<C>(s: AttemptState<C>, r: AttemptEnd<C>): void {
  if (s.settled) return;
  s.settled = true;
  s.headersTimer.cancel();
  if (s.span.recording) s.span.set({ "herd.attempt_outcome": r.kind });
  if (r.kind === "failed") s.span.end(`${r.reason}: ${r.message}`);
  else if (!(r.kind === "committed" && r.answer.kind === "stream")) s.span.end();
  s.cb(r);
}

function onReply<C>(s: AttemptState<C>, r: LegReply<C>): void {
  const { x } = s;
  if (r.status >= 500 || r.status === 429) {
    // This worker cannot serve it now (overloaded, broken); another one may.
    return readAll(s, r.body, Infinity, (e, text) =>
      failed(s, new Error(`HTTP ${r.status}${text ? `: ${text.slice(0, 200)}` : ""}`), "status_5xx", r.status, e),
    );
  }
  if (r.status !== 200) {
    // The engine refused the request itself (4xx): the client's problem, relayed as the engine said it.
    return readAll(s, r.body, Infinity, (e, text) => {
      if (e !== null) return failed(s, e, "reset");
      x.t.release({ kind: "complete", status: r.status, cachedTokens: null });
      settle(s, { kind: "committed", answer: { kind: "whole", workerId: s.workerId, status: r.status, contentType: r.contentType ?? "application/json", body: text } });
    });
  }
  if (!r.body) return failed(s, new Error("empty response body"), "eof");
  if (x.collect && !/event-stream/i.test(r.contentType ?? "")) {
    // An engine that answered a collected leg with JSON after all (it ignored `stream`): an
    // ordinary non-streamed answer from here on, relayed as it is.
    x.collect = false;
    x.leg = { ...x.leg, stream: false };
  }
  if (x.leg.stream && x.toClient) return x.pinned ? readFirstToken(s, r.body, r.contentType) : readFirst(s, r.body, r.contentType);
  if (!x.toClient || !((r.contentLength ?? NaN) > SMALL_ANSWER_BYTES)) return readWhole(s, r.body, r.contentType);
  commit(s, r.body, null, r.contentType);
}

/** Classify a failure before the commit point: final (client gone, timeout, shutdown) or retryable. */
function failed<C>(s: AttemptState<C>, e: unknown, fallback: UpstreamErrorKind, status?: number, cause2?: unknown): void {
  const { t, d } = s.x;
  const cause = s.ac.signal.reason;
  t.endAttempt(s.ac);
  if (s.x.pinned && cause instanceof AbortCause && cause.kind === "plan") return settle(s, { kind: "aborted" });
  if (s.x.pinned && cause instanceof AbortCause && (cause.kind === "first_token_timeout" || cause.kind === "idle_timeout")) {
    // A pinned leg's timeout goes back to its plan, which retries it elsewhere (P/D rules).
    return settle(s, { kind: "failed", reason: cause.kind, message: cause.message, status: null });
  }
  if (s.ac.signal.aborted && cause instanceof AbortCause && cause.kind !== "worker_down" && cause.kind !== "drain") {
    const answer = finalAbort<C>(t, s.workerId, cause);
    return settle(s, { kind: "committed", answer });
  }
  // The worker went away, or reached its drain deadline, before the commit point: retry elsewhere.
  if (cause instanceof AbortCause) return settle(s, { kind: "failed", reason: cause.kind === "drain" ? "drain" : "worker_down", message: cause.message, status: null });
  if (cause2 !== undefined && cause2 !== null) d.log.debug("reading an error answer failed", { err: errorMessage(cause2) });
  settle(s, { kind: "failed", reason: fallback, message: errorMessage(e), status: status ?? null });
}

function finalAbort<C>(t: Ticket, workerId: string, cause: AbortCause): Answer<C> {
  if (cause.kind === "client" || cause.kind === "client_stalled") {
    t.release({ kind: "client_closed", phase: "before_first_token" });
    return { kind: "error", error: new HerdError(499, "invalid_request_error", "client closed the request", "client_closed") };
  }
  if (cause.kind === "shutdown") {
    t.release({ kind: "upstream_failed", status: 503, reason: "shutdown" });
    return { kind: "error", error: new HerdError(503, "service_unavailable", "herd is shutting down", "draining", null, { "retry-after": "1" }) };
  }
  // first_token_timeout or idle_timeout: a 504, never retried.
  const reason = cause.kind as "first_token_timeout" | "idle_timeout";
  t.upstreamFailed(workerId, reason);
  t.release({ kind: "upstream_failed", status: 504, reason });
  return { kind: "error", error: new HerdError(504, "server_error", `upstream worker ${workerId}: ${cause.message}`, "upstream_timeout") };
}

/** The router's view of a failure before the commit point (nothing has reached the client yet). */
function failureOf(reason: UpstreamErrorKind, status?: number): Failure {
  const kind: FailureKind = reason === "status_5xx" ? "status" : reason === "first_token_timeout" ? "timeout" : "connect";
  const dead = reason === "connect" || reason === "peer_unreachable" || reason === "head_timeout"; // ejects the target (router/evidence.ts)
  return status === undefined ? { kind, firstByteSent: false, dead } : { kind, status, firstByteSent: false, dead };
}

/** Read an error answer whole (a bounded tail is kept); `done(error | null, text)`. */
function readAll<C>(s: AttemptState<C>, body: ChunkSource<C> | null, _limit: number, done: (e: unknown, text: string) => void): void {
  if (!body) return done(null, "");
  const fmt = s.x.d.upstream.format;
  const chunks: C[] = [];
  let size = 0;
  const next = (): void =>
    body.read((r) => {
      if ("error" in r) return done(r.error, "");
      if (r.done) return done(null, fmt.text(fmt.concat(chunks, size)));
      if (size < 64 * 1024) {
        chunks.push(r.value);
        size += fmt.size(r.value);
      }
      next();
    });
  next();
}

/** A stream: wait for its first chunk (the commit point). */
function readFirst<C>(s: AttemptState<C>, body: ChunkSource<C>, contentType: string | null): void {
  body.read((r) => {
    if ("error" in r) return failed(s, r.error, "reset");
    if (r.done) return failed(s, new Error("upstream closed the stream before any data"), "eof");
    commit(s, body, r.value, contentType);
  });
}

/**
 * A pinned stream (P/D client leg): read until the first token before committing, so a stream whose
 * first event is the worker's error event (vLLM's kv_load_failure_policy fail: 200, then
 * `data: {"error": …}`) is a failure before the first token that its plan may retry. Buffered
 * chunks are bounded by SMALL_ANSWER_BYTES; the headers timer (commit bound) still runs.
 */
function readFirstToken<C>(s: AttemptState<C>, body: ChunkSource<C>, contentType: string | null): void {
  const fmt = s.x.d.upstream.format;
  const scan = fmt.scanner();
  const chunks: C[] = [];
  let size = 0;
  const next = (): void =>
    body.read((r) => {
      if ("error" in r) return failed(s, r.error, "reset");
      if (r.done) {
        if (chunks.length === 0) return failed(s, new Error("upstream closed the stream before any data"), "eof");
        return commit(s, body, fmt.concat(chunks, size), contentType);
      }
      chunks.push(r.value);
      size += fmt.size(r.value);
      scan.push(r.value);
      if (!scan.sawToken && scan.sawError === true) {
        body.cancel();
        return failed(s, new Error("the stream's first event is an error event"), "status_5xx");
      }
      if (scan.sawToken || scan.ended || size > SMALL_ANSWER_BYTES) return commit(s, body, fmt.concat(chunks, size), contentType);
      next();
    });
  next();
}

/**
 * A non-streaming answer is one JSON document the engine sends once generation is over. Up to
 * SMALL_ANSWER_BYTES it is read whole before anything goes out, with at most idle_timeout_ms
 * between chunks: a failure while reading is still a clean answer (retryable reset, or a 504 for a
 * stall) and the lease ends when the engine is done. A longer one is piped from where the buffer
 * stops (the relay bounds its idle gaps). A leg with a successor is always read whole.
 */
function readWhole<C>(s: AttemptState<C>, body: ChunkSource<C>, contentType: string | null): void {
  const { d, t } = s.x;
  const fmt = d.upstream.format;
  s.headersTimer.cancel();
  // One idle timer for the whole read, re-armed lazily: a chunk only moves `lastChunkAtMs`, and the
  // timer, when it fires early, waits out the rest (was a cancel + setTimer per chunk).
  let lastChunkAtMs = d.clock.now();
  let bodyTimer: TimerHandle | null = null;
  const check = (): void => {
    const left = lastChunkAtMs + d.idleTimeoutMs - d.clock.now();
    if (left > 0) return void (bodyTimer = d.clock.setTimer(left, check));
    bodyTimer = null;
    s.ac.abort(new AbortCause("idle_timeout", `response body stalled for ${d.idleTimeoutMs} ms`));
  };
  bodyTimer = d.clock.setTimer(d.idleTimeoutMs, check);
  const chunks: C[] = [];
  let size = 0;
  const next = (): void =>
    body.read((r) => {
      if ("error" in r) {
        bodyTimer?.cancel();
        return failed(s, r.error, "reset");
      }
      if (!r.done) {
        chunks.push(r.value);
        size += fmt.size(r.value);
        lastChunkAtMs = d.clock.now();
        if (size <= SMALL_ANSWER_BYTES || !s.x.toClient) return next();
      }
      bodyTimer?.cancel();
      const whole = fmt.concat(chunks, size);
      if (!r.done) return commit(s, body, whole, contentType);
      if (!s.x.toClient) {
        t.endAttempt(s.ac);
        return settle(s, { kind: "done", text: fmt.text(whole) });
      }
      const usage = fmt.usage();
      usage.push(whole);
      t.release({ kind: "complete", status: 200, cachedTokens: usage.cachedTokens, outputTokens: usage.outputTokens ?? null });
      settle(s, { kind: "committed", answer: { kind: "whole", workerId: s.workerId, status: 200, contentType: contentType ?? "application/json", body: whole } });
    });
  next();
}

/** Commit point passed: from here on failures are reported inside the body. */
function commit<C>(s: AttemptState<C>, body: ChunkSource<C>, first: C | null, contentType: string | null): void {
  const { d, t, leg } = s.x;
  s.headersTimer.cancel();
  // A routed chat stream over HTTP bytes may continue on another worker if this one fails (migrate.ts).
  const mig = d.migration && d.migration.limit > 0 && !s.x.pinned && s.x.toClient && d.upstream.format.sseBytes && notReplayable(leg) === null
    ? new MigratingSource(d as unknown as LifecycleDeps<Uint8Array>, t, leg, s.x.requestId, d.migration, { workerId: s.workerId, ac: s.ac, body: body as unknown as ChunkSource<Uint8Array> })
    : null;
  if (s.x.collect) return collectCommitted(s, body, first, mig);
  const source = relay({
    source: (mig as unknown as ChunkSource<C> | null) ?? body,
    format: d.upstream.format,
    first: mig ? (mig.first(first as unknown as Uint8Array | null) as unknown as C | null) : first,
    sse: leg.stream,
    ac: mig?.handle ?? s.ac,
    clock: d.clock,
    firstTokenDeadlineMs: s.startedAtMs + d.firstTokenTimeoutMs,
    idleTimeoutMs: d.idleTimeoutMs,
    onFirstToken: () => t.firstToken(s.ac),
    onEnd: (end) => relayEnded(s, end),
  });
  const sseType = "text/event-stream; charset=utf-8";
  settle(s, { kind: "committed", answer: { kind: "stream", workerId: s.workerId, sse: leg.stream, contentType: leg.stream ? sseType : (contentType ?? "application/json"), body: source } });
}

function relayEnded<C>(s: AttemptState<C>, end: RelayEnd): void {
  const { t, d } = s.x;
  if (s.span.recording) s.span.set({ "herd.relay_end": end.kind });
  s.span.end(end.kind === "complete" || end.kind === "client_closed" || end.kind === "client_stalled" ? undefined : `${end.reason}: ${end.message}`);
  if (end.kind === "client_closed") return t.release({ kind: "client_closed", phase: "streaming" });
  if (end.kind === "client_stalled") {
    d.log.info("client stopped reading; stream closed", { worker: s.workerId });
    return t.release({ kind: "client_stalled" });
  }
  if (end.kind === "complete") return t.release({ kind: "complete", status: 200, cachedTokens: end.cachedTokens, outputTokens: end.outputTokens ?? null });
  t.upstreamFailed(s.workerId, end.reason);
  d.log.warn("upstream failed mid-stream", { worker: s.workerId, reason: end.reason, err: end.message });
  t.release({ kind: "broken", reason: end.reason });
}

/**
 * A collected leg past its first chunk: the relay (deadlines, migration through `mig`) is read
 * here, not by the client, and its events assembled into one chat.completion (collect.ts). A
 * failure the migration could not cover is an ordinary error answer (502, a timeout 504): nothing
 * has reached the client.
 */
function collectCommitted<C>(s: AttemptState<C>, body: ChunkSource<C>, first: C | null, mig: MigratingSource | null): void {
  const { d, t } = s.x;
  const asm = new ChatAssembler();
  // The migrating source parses each event anyway: the assembler takes its objects (collect.ts).
  if (mig) mig.tap = asm;
  let end: RelayEnd | null = null;
  const source = relay({
    source: (mig as unknown as ChunkSource<C> | null) ?? body,
    format: d.upstream.format,
    first: mig ? (mig.first(first as unknown as Uint8Array | null) as unknown as C | null) : first,
    sse: true,
    ac: mig?.handle ?? s.ac,
    clock: d.clock,
    firstTokenDeadlineMs: s.startedAtMs + s.boundMs,
    idleTimeoutMs: d.idleTimeoutMs,
    onFirstToken: () => t.engineFirstToken(s.ac), // the client gets no token before the whole answer
    onEnd: (e) => (end = e),
  });
  const worker = () => mig?.workerId ?? s.workerId;
  const finish = (): void => {
    const e = end ?? { kind: "failed" as const, reason: "eof" as const, message: "the engine closed the stream before it finished" };
    if (s.span.recording) s.span.set({ "herd.relay_end": e.kind });
    if (asm.tooBig) {
      t.upstreamFailed(worker(), "status_5xx");
      return settle(s, { kind: "committed", answer: upstreamFailure<C>(t, { reason: "status_5xx", message: "answer too long to assemble", worker: worker() }) });
    }
    if (e.kind === "client_closed" || e.kind === "client_stalled") return settle(s, { kind: "committed", answer: finalAbort<C>(t, worker(), new AbortCause("client", "client disconnected")) });
    if (e.kind === "failed") {
      d.log.warn("upstream failed mid-generation (non-streaming)", { worker: worker(), reason: e.reason, err: e.message });
      const answer: Answer<C> = e.reason === "first_token_timeout" || e.reason === "idle_timeout" || e.reason === "shutdown"
        ? finalAbort<C>(t, worker(), new AbortCause(e.reason, e.message))
        : (t.upstreamFailed(worker(), e.reason), upstreamFailure<C>(t, { reason: e.reason, message: e.message, worker: worker() }));
      return settle(s, { kind: "committed", answer });
    }
    if (asm.error !== null) {
      d.log.warn("engine ended a non-streamed answer with an error event", { worker: worker(), err: JSON.stringify(asm.error).slice(0, 200) });
      t.upstreamFailed(worker(), "status_5xx");
      return settle(s, { kind: "committed", answer: upstreamFailure<C>(t, { reason: "status_5xx", message: "the engine ended with an error event", worker: worker() }) });
    }
    t.release({ kind: "complete", status: 200, cachedTokens: e.cachedTokens, outputTokens: e.outputTokens ?? null });
    const json = JSON.stringify(asm.result(Math.floor(wallClockMs() / 1000)));
    settle(s, { kind: "committed", answer: { kind: "whole", workerId: worker(), status: 200, contentType: "application/json", body: json } });
  };
  const next = (): void =>
    source.read((r) => {
      if ("error" in r || r.done) return finish();
      if (!mig) asm.push(r.value as unknown as Uint8Array);
      if (asm.tooBig) {
        source.cancel();
        return finish();
      }
      next();
    });
  next();
}
