// The downstream body: a pull-based ReadableStream over the upstream reader. Pull-based with a
// high-water mark of 0 means a chunk is read from the engine only when the client's socket has taken
// the previous one — backpressure end to end, nothing accumulates in herd.
//
// A stream (SSE) ends in exactly one of three ways: the upstream finished it (`[DONE]` or its own
// error event); it failed (reset, EOF without `[DONE]`, first-token/idle timeout, worker down,
// shutdown) and the client gets an OpenAI error event before the close; or the client went away and
// the upstream request is aborted. A non-streaming body on failure is cut (errored), which every
// HTTP client reports as a truncated response rather than a complete one.
import type { Clock, TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import { AbortCause } from "./inflight.ts";
import { SseScanner, UsageTail, sseErrorEvent } from "./sse.ts";

export type RelayEnd =
  /** cachedTokens: usage.prompt_tokens_details.cached_tokens the engine reported, null when none passed by. */
  | { kind: "complete"; cachedTokens: number | null }
  | { kind: "client_abort" }
  | { kind: "failed"; reason: UpstreamErrorKind; message: string };

/** The part of a stream reader the relay uses (keeps it independent of runtime reader typings). */
export interface ChunkReader {
  read(): Promise<{ done: true; value?: undefined } | { done: false; value: Uint8Array }>;
  cancel(reason?: unknown): Promise<void>;
}

export interface RelayOpts {
  reader: ChunkReader;
  /** Bytes already read before the commit point (a stream's first chunk, a long JSON answer's head), relayed first. */
  first: Uint8Array | null;
  sse: boolean;
  /** Aborting it aborts the upstream fetch; its reason says why (AbortCause). */
  ac: AbortController;
  clock: Clock;
  /** Clock time by which a stream must have shown a token. */
  firstTokenDeadlineMs: number;
  /** After the first token, the longest allowed silence between upstream chunks. */
  idleTimeoutMs: number;
  onFirstToken: () => void;
  /** Called exactly once. */
  onEnd: (end: RelayEnd) => void;
}

export function relayStream(o: RelayOpts): ReadableStream<Uint8Array> {
  const scanner = o.sse ? new SseScanner() : null;
  // A piped JSON answer: its usage is looked for in the bytes as they pass (a short tail only).
  const tail = o.sse ? null : new UsageTail();
  let pending = o.first;
  let lastChunkAtMs = o.clock.now();
  let timer: TimerHandle | null = null;
  let ended = false;

  const end = (e: RelayEnd) => {
    if (ended) return;
    ended = true;
    timer?.cancel();
    o.onEnd(e);
  };
  // One timer re-armed lazily: it fires at the current deadline and re-checks, instead of being
  // reset on every chunk.
  const check = () => {
    timer = null;
    if (ended) return;
    const tokenSeen = scanner ? scanner.sawToken : true;
    const deadline = tokenSeen ? lastChunkAtMs + o.idleTimeoutMs : o.firstTokenDeadlineMs;
    const now = o.clock.now();
    if (now >= deadline) {
      o.ac.abort(
        tokenSeen
          ? new AbortCause("idle_timeout", `no data from the engine for ${o.idleTimeoutMs} ms`)
          : new AbortCause("first_token_timeout", "no first token before the deadline"),
      );
      return;
    }
    timer = o.clock.setTimer(deadline - now, check);
  };
  const scan = (chunk: Uint8Array) => {
    lastChunkAtMs = o.clock.now();
    if (scanner && scanner.push(chunk)) o.onFirstToken();
    tail?.push(chunk);
  };
  const failure = (e: unknown): RelayEnd => {
    const cause = o.ac.signal.reason;
    if (o.ac.signal.aborted && cause instanceof AbortCause) {
      if (cause.kind === "client") return { kind: "client_abort" };
      return { kind: "failed", reason: cause.kind, message: cause.message };
    }
    return { kind: "failed", reason: "reset", message: `engine connection lost: ${errorMessage(e)}` };
  };

  return new ReadableStream<Uint8Array>(
    {
      start() {
        if (pending) scan(pending);
        check();
      },
      async pull(ctrl) {
        if (pending) {
          const chunk = pending;
          pending = null;
          ctrl.enqueue(chunk);
          return;
        }
        let r: Awaited<ReturnType<ChunkReader["read"]>>;
        try {
          r = await o.reader.read();
        } catch (e) {
          const f = failure(e);
          if (f.kind === "client_abort") {
            end(f);
            return;
          }
          if (scanner) {
            ctrl.enqueue(sseErrorEvent(f.kind === "failed" ? f.message : "stream failed", `upstream_${f.kind === "failed" ? f.reason : "reset"}`));
            ctrl.close();
          } else ctrl.error(e);
          end(f);
          return;
        }
        if (r.done) {
          if (scanner && !scanner.ended) {
            const f: RelayEnd = { kind: "failed", reason: "eof", message: "the engine closed the stream before it finished" };
            ctrl.enqueue(sseErrorEvent(f.message, "upstream_eof"));
            ctrl.close();
            end(f);
            return;
          }
          ctrl.close();
          end({ kind: "complete", cachedTokens: scanner ? scanner.cachedTokens : (tail?.cachedTokens ?? null) });
          return;
        }
        scan(r.value);
        ctrl.enqueue(r.value);
      },
      cancel() {
        // The client went away: abort the engine request so it frees its KV blocks.
        if (!o.ac.signal.aborted) o.ac.abort(new AbortCause("client", "client disconnected"));
        void o.reader.cancel().catch(() => {});
        end({ kind: "client_abort" });
      },
    },
    { highWaterMark: 0 },
  );
}
