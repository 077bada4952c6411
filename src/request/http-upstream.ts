// The production Upstream: one HTTP POST per leg to the worker's OpenAI server (vLLM, SGLang,
// TRT-LLM serve the same paths). `fetch` is injectable so tests can answer without sockets.
// Error messages from the runtime (e.g. Bun's "pass `verbose: true` …" hint) stay inside the
// error object: the lifecycle logs them and sends the client herd's own text (issue 10).
//
// First-byte deadline (issue 21): an engine serving a stream sends its response head before the
// first token (vLLM and SGLang return a StreamingResponse, whose head Starlette sends at once), so
// a stream with no head within `firstByteTimeoutMs` is a dead or black-holed engine, not a slow
// one: `{ error, kind: "head_timeout" }`, which ejects the worker and is retried elsewhere. fetch
// does not expose the connect phase, so this one deadline bounds connect + head. Non-streaming
// answers carry their head at the end of generation and get only the lifecycle's bounds.
import type { Clock } from "../core/clock.ts";
import { SseScanner, UsageTail, sseErrorEvent } from "./sse.ts";
import type { ChunkScanner, ChunkSource, LegError, LegReply, LegRequest, ReadResult, StreamFormat, Upstream } from "./upstream.ts";

import type { Endpoint } from "../protocol/openai.ts";

export type FetchFn = (url: string, init: RequestInit) => Promise<Response>;

/**
 * The worker path of each endpoint: vLLM's OpenAI server (vllm/entrypoints/openai/api_server.py and
 * the pooling/tokenization routers) serves all of these; `/rerank` and `/score` are its aliases of the
 * /v1 paths, so herd always sends the /v1 form.
 */
const UPSTREAM_PATH: Record<Endpoint, string> = {
  chat: "/v1/chat/completions",
  completions: "/v1/completions",
  responses: "/v1/responses",
  embeddings: "/v1/embeddings",
  score: "/v1/score",
  rerank: "/v1/rerank",
  pooling: "/pooling",
  tokenize: "/tokenize",
  detokenize: "/detokenize",
};

/** SSE / JSON bytes: what an OpenAI server streams. */
export const BYTES_FORMAT: StreamFormat<Uint8Array> = {
  sseBytes: true,
  scanner: () => new SseScanner(),
  usage: (): ChunkScanner<Uint8Array> => {
    const tail = new UsageTail();
    return {
      push: (c) => (tail.push(c), false),
      sawToken: true,
      ended: true,
      get cachedTokens() {
        return tail.cachedTokens;
      },
      get outputTokens() {
        return tail.outputTokens;
      },
    };
  },
  size: (c) => c.byteLength,
  concat: (cs, size) => (cs.length === 1 ? cs[0]! : new Uint8Array(Buffer.concat(cs, size))),
  text: (c) => new TextDecoder().decode(c),
  errorEvent: (message, code) => sseErrorEvent(message, code),
};

/** A web ReadableStream reader as a ChunkSource. */
export function readerSource(reader: ReadableStreamDefaultReader<Uint8Array>): ChunkSource<Uint8Array> {
  return {
    read(cb: (r: ReadResult<Uint8Array>) => void) {
      reader.read().then(
        (r) => cb(r.done ? { done: true } : { done: false, value: r.value }),
        (error: unknown) => cb({ done: false, error }),
      );
    },
    cancel() {
      void reader.cancel().catch(() => {});
    },
  };
}

/**
 * A whole small body as a ChunkSource: one native read (Response.bytes()), then the end. No
 * ReadableStream reader, which costs more than the proxying itself for a small JSON answer.
 */
export function wholeSource(res: Response): ChunkSource<Uint8Array> {
  return new WholeSource(res);
}

/** (A class: its methods are shared, where an object literal's made two closures and a scope per answer.) */
class WholeSource implements ChunkSource<Uint8Array> {
  private read_ = false;
  constructor(private readonly res: Response) {}
  read(cb: (r: ReadResult<Uint8Array>) => void): void {
    if (this.read_) return cb(DONE);
    this.read_ = true;
    this.res.bytes().then(
      (value) => cb(value.byteLength > 0 ? { done: false, value } : DONE),
      (error: unknown) => cb({ done: false, error }),
    );
  }
  cancel(): void {
    if (!this.read_ && !this.res.bodyUsed) void this.res.body?.cancel().catch(() => {});
  }
}

const DONE: ReadResult<Uint8Array> = Object.freeze({ done: true });

/** Non-streaming answers up to this declared size are read with one native call (wholeSource). */
export const WHOLE_READ_MAX_BYTES = 1 << 20;

/**
 * A fetch Response as a leg's answer head and body (any Upstream that speaks HTTP). `whole`: the
 * leg is not streamed, so a body with a small declared length is read in one call.
 */
export function legReply(res: Response, whole = false): LegReply<Uint8Array> {
  const declared = res.headers.get("content-length");
  const contentLength = declared === null ? null : Number(declared);
  const small = whole && contentLength !== null && contentLength <= WHOLE_READ_MAX_BYTES;
  return {
    status: res.status,
    contentType: res.headers.get("content-type"),
    contentLength,
    // (res.body is not touched on the small path: creating the stream would slow bytes() down)
    body: small ? wholeSource(res) : res.body ? readerSource(res.body.getReader() as ReadableStreamDefaultReader<Uint8Array>) : null,
  };
}

export interface HttpUpstreamOptions {
  clock: Clock;
  /** A stream's response head must arrive within this (frontend.engine_first_byte_timeout_ms). */
  firstByteTimeoutMs: () => number;
}

export class HttpUpstream implements Upstream<Uint8Array> {
  readonly format = BYTES_FORMAT;
  constructor(
    private readonly fetchFn: FetchFn = (url, init) => fetch(url, init),
    private readonly opts: HttpUpstreamOptions | null = null,
  ) {}

  send(leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<Uint8Array> | LegError) => void): void {
    const limitMs = leg.stream && this.opts ? this.opts.firstByteTimeoutMs() : 0;
    if (limitMs > 0) {
      const own = new AbortController();
      const timer = this.opts!.clock.setTimer(limitMs, () => own.abort(new Error(`no response head within ${limitMs} ms`)));
      return this.post(leg, AbortSignal.any([signal, own.signal]), (r) => {
        timer.cancel();
        reply("error" in r && own.signal.aborted && !signal.aborted ? { error: own.signal.reason, kind: "head_timeout" } : r);
      });
    }
    this.post(leg, signal, reply);
  }

  private post(leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<Uint8Array> | LegError) => void): void {
    const headers: Record<string, string> = { "content-type": "application/json", accept: leg.stream ? "text/event-stream" : "application/json", "x-request-id": leg.requestId };
    if (leg.traceparent) headers.traceparent = leg.traceparent;
    this.fetchFn(leg.workerUrl + UPSTREAM_PATH[leg.endpoint], {
      method: "POST",
      headers,
      body: leg.body,
      signal,
    }).then(
      (res) => reply(legReply(res, !leg.stream)),
      (error: unknown) => reply({ error }),
    );
  }
}
