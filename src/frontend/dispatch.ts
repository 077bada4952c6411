// Sending one checked OpenAI request to a worker and relaying the answer.
//
// Commit point: nothing is sent to the client until the upstream has answered 200 AND (for a
// stream) delivered its first body chunk. Any failure before that (refused, reset, 5xx, EOF) may be
// retried once on another eligible worker, within the retry budget; after it, never (the client
// already holds part of an answer). After the commit point a failure becomes an OpenAI error event
// `data: {"error": …}` and then the stream closes — never a bare close, which the openai client
// would take for a normal end (docs/references.md#reliability-1.1).
import type { Clock, TimerHandle } from "../core/clock.ts";
import { HerdError, errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { Worker } from "../workers/worker.ts";
import type { HerdMetrics, UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import type { Lease, Router } from "../router/index.ts";
import type { Failure, FailureKind } from "../router/retry.ts";
import type { RouteRequest } from "../router/types.ts";
import { nonStreamingHeadersBoundMs, requestedMaxTokens } from "./bounds.ts";
import { AbortCause, type InFlightTracker } from "./inflight.ts";
import { relayStream, type ChunkReader, type RelayEnd } from "./relay.ts";
import { lastCachedTokens } from "./sse.ts";
import type { CheckedRequest } from "../protocol/openai.ts";

export interface DispatchDeps {
  router: Router;
  registry: WorkerRegistry;
  metrics: HerdMetrics;
  tracker: InFlightTracker;
  clock: Clock;
  log: Logger;
  firstTokenTimeoutMs: number;
  idleTimeoutMs: number;
}

export interface DispatchInput {
  checked: CheckedRequest;
  /** The exact bytes to forward (the client's own when nothing was stripped). */
  bodyText: string;
  route: Omit<RouteRequest, "exclude">;
  /** Aborts when the client disconnects. */
  clientSignal: AbortSignal;
  requestId: string;
  /** Frontend arrival time (clock ms), for TTFT and end-to-end latency. */
  arrivedAtMs: number;
  /** Called exactly once when the request is over (response fully sent, failed or aborted). */
  onDone: (status: number, worker: string | null) => void;
}

type Attempt =
  | { kind: "committed"; response: Response }
  | { kind: "final"; response: Response }
  | { kind: "retryable"; reason: UpstreamErrorKind; message: string; failure: Failure };

/** Non-streaming answers up to this size (declared by Content-Length) are read whole; larger ones are piped. */
const SMALL_ANSWER_BYTES = 1 << 20;

const UPSTREAM_PATH = { chat: "/v1/chat/completions", completions: "/v1/completions" } as const;

export function errorResponse(e: HerdError, extraHeaders: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(e.toJSON()), {
    status: e.status,
    headers: { "content-type": "application/json", ...e.headers, ...extraHeaders },
  });
}

export async function dispatch(deps: DispatchDeps, input: DispatchInput): Promise<Response> {
  const { router, metrics, log } = deps;
  const exclude = new Set<string>();
  let lastFailure: { reason: UpstreamErrorKind; message: string; worker: string } | null = null;
  for (let attempt = 0; ; attempt++) {
    let worker: Readonly<Worker>;
    let lease: Lease;
    let predicted: number | null;
    try {
      // route() and book() in one tick, so no other request can slip between them. With block
      // hashes in the route the lease also counts the prompt's blocks active on the worker.
      const r = router.routeAndBook({ ...input.route, exclude });
      ({ worker, lease } = r);
      predicted = r.decision.predictedCachedTokens ?? null;
    } catch (e) {
      // No (other) worker: after a failed attempt report that failure, it is the real cause.
      if (lastFailure) return finalFailure(input, lastFailure);
      throw e;
    }
    const result = await attemptOn(deps, input, worker, lease, predicted);
    if (result.kind !== "retryable") return result.response;
    metrics.upstreamError(worker.id, result.reason);
    lastFailure = { reason: result.reason, message: result.message, worker: worker.id };
    log.warn("upstream failed before first byte", { worker: worker.id, reason: result.reason, err: result.message, attempt });
    if (input.clientSignal.aborted) return finalFailure(input, lastFailure);
    if (!router.allowRetry(attempt + 1, result.failure)) return finalFailure(input, lastFailure);
    metrics.retry(input.checked.model, result.reason);
    exclude.add(worker.id);
  }
}

function finalFailure(input: DispatchInput, f: { reason: UpstreamErrorKind; message: string; worker: string }): Response {
  const err = new HerdError(502, "server_error", `upstream worker ${f.worker} failed: ${f.message}`, `upstream_${f.reason}`);
  input.onDone(err.status, f.worker);
  return errorResponse(err);
}

async function attemptOn(deps: DispatchDeps, input: DispatchInput, worker: Readonly<Worker>, lease: Lease, predicted: number | null): Promise<Attempt> {
  const { clock, metrics } = deps;
  const { checked } = input;
  // Predicted vs engine-reported cached tokens, counted together so their ratio compares like with like.
  const cachedReport = (cached: number | null) => {
    if (cached !== null) metrics.cachedTokens(checked.model, predicted, cached);
  };
  const ac = new AbortController();
  const onClientAbort = () => ac.abort(new AbortCause("client", "client disconnected"));
  if (input.clientSignal.aborted) onClientAbort();
  input.clientSignal.addEventListener("abort", onClientAbort);
  deps.tracker.add(worker.id, ac);
  const startedAtMs = clock.now();
  // Before the commit point a stream must show its first chunk within first_token_timeout_ms; a
  // non-streaming answer carries its tokens in the final response, so its headers get the
  // generation-sized bound of bounds.ts. Either way a timeout is a 504, never retried (a slow
  // prefill or decode would just be repeated elsewhere).
  const headersBoundMs = checked.stream
    ? deps.firstTokenTimeoutMs
    : nonStreamingHeadersBoundMs(deps.firstTokenTimeoutMs, requestedMaxTokens(checked.body));
  const firstTokenTimer = clock.setTimer(headersBoundMs, () =>
    ac.abort(
      new AbortCause(
        "first_token_timeout",
        checked.stream ? `no first token within ${headersBoundMs} ms` : `no response within ${headersBoundMs} ms (non-streaming bound)`,
      ),
    ),
  );
  // Bounds each gap while a non-streaming body is buffered (the engine is done generating by then).
  let bodyTimer: TimerHandle | null = null;
  const cleanup = () => {
    firstTokenTimer.cancel();
    bodyTimer?.cancel();
    input.clientSignal.removeEventListener("abort", onClientAbort);
    deps.tracker.delete(worker.id, ac);
    lease.release();
  };
  const failed = (e: unknown, fallback: UpstreamErrorKind, status?: number): Attempt => {
    cleanup();
    const cause = ac.signal.reason;
    if (cause instanceof AbortCause) {
      if (cause.kind === "client") {
        metrics.clientAbort(checked.model, "before_first_token");
        input.onDone(499, worker.id);
        return { kind: "final", response: new Response(null, { status: 499 }) };
      }
      if (cause.kind === "first_token_timeout" || cause.kind === "idle_timeout") {
        metrics.upstreamError(worker.id, cause.kind);
        const err = new HerdError(504, "server_error", `upstream worker ${worker.id}: ${cause.message}`, "upstream_timeout");
        input.onDone(err.status, worker.id);
        return { kind: "final", response: errorResponse(err) };
      }
      if (cause.kind === "shutdown") {
        const err = new HerdError(503, "service_unavailable", "herd is shutting down", "draining", null, { "retry-after": "1" });
        input.onDone(err.status, worker.id);
        return { kind: "final", response: errorResponse(err) };
      }
      return { kind: "retryable", reason: "worker_down", message: cause.message, failure: failureOf("worker_down") };
    }
    return { kind: "retryable", reason: fallback, message: errorMessage(e), failure: failureOf(fallback, status) };
  };

  let res: Response;
  try {
    res = await fetch(worker.url + UPSTREAM_PATH[checked.endpoint], {
      method: "POST",
      headers: {
        "content-type": "application/json",
        accept: checked.stream ? "text/event-stream" : "application/json",
        "x-request-id": input.requestId,
      },
      body: input.bodyText,
      signal: ac.signal,
    });
  } catch (e) {
    return failed(e, "connect");
  }
  if (res.status >= 500 || res.status === 429) {
    // This worker cannot serve it now (overloaded, broken); another one may.
    const text = await res.text().catch(() => "");
    return failed(new Error(`HTTP ${res.status}${text ? `: ${text.slice(0, 200)}` : ""}`), "status_5xx", res.status);
  }
  if (res.status !== 200) {
    // The engine refused the request itself (4xx): the client's problem, relayed as the engine said it.
    let text: string;
    try {
      text = await res.text();
    } catch (e) {
      return failed(e, "reset");
    }
    cleanup();
    input.onDone(res.status, worker.id);
    return { kind: "final", response: new Response(text, { status: res.status, headers: { "content-type": res.headers.get("content-type") ?? "application/json" } }) };
  }
  if (!res.body) return failed(new Error("empty response body"), "eof");
  const reader = res.body.getReader() as unknown as ChunkReader;
  let first: Uint8Array | null = null;
  if (checked.stream) {
    try {
      const r = await reader.read();
      if (r.done) return failed(new Error("upstream closed the stream before any data"), "eof");
      first = r.value;
    } catch (e) {
      return failed(e, "reset");
    }
  } else if (!(Number(res.headers.get("content-length") ?? NaN) > SMALL_ANSWER_BYTES)) {
    // A non-streaming answer is one JSON document the engine sends once generation is over. Up to
    // SMALL_ANSWER_BYTES (with or without a Content-Length) it is read whole before anything goes
    // out, with at most idle_timeout_ms between chunks: a failure while reading is still a clean
    // answer (retryable reset, or a 504 for a stall) and the lease ends when the engine is done.
    // A longer one is piped from where the buffer stops (the relay bounds its idle gaps).
    firstTokenTimer.cancel();
    const armBodyTimer = () => {
      bodyTimer?.cancel();
      bodyTimer = clock.setTimer(deps.idleTimeoutMs, () =>
        ac.abort(new AbortCause("idle_timeout", `response body stalled for ${deps.idleTimeoutMs} ms`)),
      );
    };
    armBodyTimer();
    const chunks: Uint8Array[] = [];
    let size = 0;
    let complete = false;
    try {
      while (size <= SMALL_ANSWER_BYTES) {
        const r = await reader.read();
        if (r.done) {
          complete = true;
          break;
        }
        chunks.push(r.value);
        size += r.value.byteLength;
        armBodyTimer();
      }
    } catch (e) {
      return failed(e, "reset");
    }
    // (TS narrows the closure-assigned timer to null here; the cast restores its declared type.)
    (bodyTimer as TimerHandle | null)?.cancel();
    const bytes = Buffer.concat(chunks, size);
    if (complete) {
      cleanup();
      metrics.finished(checked.model, (clock.now() - input.arrivedAtMs) / 1000);
      cachedReport(lastCachedTokens(new TextDecoder().decode(bytes)));
      input.onDone(200, worker.id);
      return {
        kind: "committed",
        response: new Response(bytes, { status: 200, headers: { "content-type": res.headers.get("content-type") ?? "application/json", "x-herd-worker": worker.id } }),
      };
    }
    first = bytes;
  }
  // Commit point passed: from here on failures are reported inside the response.
  // The client-abort listener stays: a disconnect while a read is pending aborts that read at once.
  // A piped body is bounded by the relay: idle_timeout_ms between chunks.
  firstTokenTimer.cancel();
  const body = relayStream({
    reader,
    first,
    sse: checked.stream,
    ac,
    clock,
    firstTokenDeadlineMs: startedAtMs + deps.firstTokenTimeoutMs,
    idleTimeoutMs: deps.idleTimeoutMs,
    onFirstToken: () => {
      lease.firstToken();
      metrics.firstToken(checked.model, (clock.now() - input.arrivedAtMs) / 1000);
    },
    onEnd: (end: RelayEnd) => {
      input.clientSignal.removeEventListener("abort", onClientAbort);
      deps.tracker.delete(worker.id, ac);
      lease.release();
      if (end.kind === "client_abort") metrics.clientAbort(checked.model, "streaming");
      else if (end.kind === "failed") {
        metrics.upstreamError(worker.id, end.reason);
        deps.log.warn("upstream failed mid-stream", { worker: worker.id, reason: end.reason, err: end.message });
      } else {
        metrics.finished(checked.model, (clock.now() - input.arrivedAtMs) / 1000);
        cachedReport(end.cachedTokens);
      }
      input.onDone(200, worker.id);
    },
  });
  const headers: Record<string, string> = checked.stream
    ? { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", "x-herd-worker": worker.id }
    : { "content-type": res.headers.get("content-type") ?? "application/json", "x-herd-worker": worker.id };
  return { kind: "committed", response: new Response(body, { status: 200, headers }) };
}

/** The router's view of a failure before the commit point (nothing has reached the client yet). */
function failureOf(reason: UpstreamErrorKind, status?: number): Failure {
  const kind: FailureKind = reason === "status_5xx" ? "status" : reason === "first_token_timeout" ? "timeout" : "connect";
  return status === undefined ? { kind, firstByteSent: false } : { kind, status, firstByteSent: false };
}
