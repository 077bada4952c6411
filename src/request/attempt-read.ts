// One attempt's answer, from the worker's reply head to the attempt's end (lifecycle.ts attemptOn
// sends the leg and hands the reply here): an error status read whole, a non-streaming answer read
// whole under its idle bound, a stream committed at its first chunk (or, pinned, its first token)
// and relayed, a collected leg assembled (collect.ts). Split from lifecycle.ts, which routes,
// retries and starts attempts; the rules are in its header comment.
import { wallClockMs, type TimerHandle } from "../core/clock.ts";
import { HerdError, errorMessage } from "../core/errors.ts";
import type { Span } from "../core/trace.ts";
import type { UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import { SMALL_ANSWER_BYTES, upstreamFailure, type Answer, type AttemptCtx, type AttemptEnd, type LifecycleDeps } from "./lifecycle.ts";
import { relay, type RelayEnd } from "./relay.ts";
import { AbortCause, type Ticket } from "./ticket.ts";
import type { ChunkSource, LegReply } from "./upstream.ts";
import { MigratingSource, notReplayable } from "./migrate.ts";
import { ChatAssembler } from "./collect.ts";

export interface AttemptState<C> {
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

export function onReply<C>(s: AttemptState<C>, r: LegReply<C>): void {
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
export function failed<C>(s: AttemptState<C>, e: unknown, fallback: UpstreamErrorKind, status?: number, cause2?: unknown): void {
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
