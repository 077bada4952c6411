// The Upstream port: how one leg of a request reaches a worker. Production sends it over HTTP
// (http-upstream.ts); `herd simulate` and virtual-time tests hand it to a SimScheduler
// (src/simulate/sim-upstream.ts). The lifecycle (lifecycle.ts) never calls fetch and never owns a socket.
//
// Callback-shaped on purpose: a sim upstream answers synchronously inside a virtual-clock step, so
// a simulated run keeps the exact event order of the engine model (a Promise would defer every
// token to a microtask and reorder routing against lease releases of the same step).
import type { UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import type { Endpoint } from "../protocol/openai.ts";

/** One outcome of `ChunkSource.read`. */
export type ReadResult<C> = { done: true } | { done: false; value: C } | { done: false; error: unknown };

/**
 * A pull-based body: one `read` at a time, answered exactly once (possibly synchronously) with the
 * next chunk, the end, or an error. Nothing is read from the worker until asked (backpressure).
 * A result object may be reused by the source for its next chunk: use it before reading again.
 */
export interface ChunkSource<C> {
  read(cb: (r: ReadResult<C>) => void): void;
  /** The reader is not interested any more (client gone); frees the worker's side. */
  cancel(): void;
}

/** What a leg sends: the request as the worker's OpenAI server takes it. */
export interface LegRequest {
  /** Unique per attempt (request id + leg + attempt), the worker-side request id. */
  id: string;
  /** The client's request id (x-request-id), forwarded. */
  requestId: string;
  workerId: string;
  workerUrl: string;
  endpoint: Endpoint;
  /** The exact JSON text to send. */
  body: string;
  stream: boolean;
  /** Prompt token ids when preprocessing produced them (the sim upstream runs on them). */
  promptTokens?: ArrayLike<number>;
  maxTokens?: number | null;
  /** The engine scheduling priority the body carries (src/frontend/engine-priority.ts; lower first), for upstreams that do not read the body. */
  priority?: number;
  /** W3C traceparent of this attempt's span, sent as the `traceparent` header (the engine's spans join the trace). */
  traceparent?: string;
}

/** The worker's answer head and its body. */
export interface LegReply<C> {
  status: number;
  contentType: string | null;
  /** Declared Content-Length, null when absent. */
  contentLength: number | null;
  body: ChunkSource<C> | null;
}

/** How the lifecycle reads a chunk type: token detection, end marker, usage, error events. */
export interface StreamFormat<C> {
  /** Chunks are SSE/JSON bytes (HTTP): what request migration can read and rewrite. */
  readonly sseBytes?: boolean;
  /** A fresh scanner for one streamed body. */
  scanner(): ChunkScanner<C>;
  /** A scanner for a non-streamed body (only cached tokens matter). */
  usage(): ChunkScanner<C>;
  /** Byte size (for the non-streaming read-whole bound). */
  size(c: C): number;
  /** Join buffered chunks into one. */
  concat(cs: C[], size: number): C;
  /** A whole body as text (error answers, a leg's answer handed to the next leg). */
  text(c: C): string;
  /** The error event a stream ends with after the commit point. */
  errorEvent(message: string, code: string): C;
}

export interface ChunkScanner<C> {
  /** Feed one chunk; true when it completed the first token. */
  push(c: C): boolean;
  readonly sawToken: boolean;
  /** The worker ended the stream properly ([DONE] or its own error event). */
  readonly ended: boolean;
  /** usage…cached_tokens the worker reported, null when none seen. */
  readonly cachedTokens: number | null;
  /** Output tokens (usage.completion_tokens, else token events counted); absent or null when unknown. */
  readonly outputTokens?: number | null;
  /** The worker sent its own error event (optional: formats without error events omit it). */
  readonly sawError?: boolean;
}

/**
 * Sends one leg to one worker. `reply` is called exactly once: with the answer head (any status),
 * or with `{ error }` when no answer came (refused, reset, aborted through `signal`). Aborting
 * `signal` after the head errors the pending or next body read. `{ error, kind }` names what failed
 * when the upstream knows better than "could not connect" (a peer node, a head deadline).
 *
 * @example
 * const up = new HttpUpstream();
 * up.send({ id: "r1.0", requestId: "r1", workerId: "w0", workerUrl: "http://127.0.0.1:8001",
 *           endpoint: "chat", body: JSON.stringify(req), stream: true }, ac.signal, (r) => {
 *   if ("error" in r) return console.error(r.error);
 *   r.body?.read(function next(x) { if (!x.done) { use(x.value); r.body!.read(next); } });
 * });
 */
export interface Upstream<C> {
  readonly format: StreamFormat<C>;
  send(leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<C> | LegError) => void): void;
}

/** No answer head came. `kind` says what failed when the upstream knows (default `connect`). */
export interface LegError {
  error: unknown;
  kind?: UpstreamErrorKind;
}
