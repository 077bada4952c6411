// The body after the commit point: a pull-based ChunkSource over the worker's body. A chunk is read
// from the worker only when the reader (the client's socket, or simulate's recorder) asked for one —
// backpressure end to end, nothing accumulates in herd.
//
// A stream ends in exactly one way: the worker finished it (`[DONE]` or its own error event); it
// failed (reset, EOF without `[DONE]`, first-token/idle timeout, worker down, shutdown) and the
// reader gets an OpenAI error event before the end; the client went away (client_closed); or the
// client stopped reading for idle_timeout_ms while herd had a chunk for it (client_stalled, never
// charged to the worker: herd was waiting on the client, not on the engine). A non-streaming body
// on failure is cut (errored), which every HTTP client reports as truncated.
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import { AbortCause } from "./ticket.ts";
import type { ChunkScanner, ChunkSource, ReadResult, StreamFormat } from "./upstream.ts";

export type RelayEnd =
  | { kind: "complete"; cachedTokens: number | null; outputTokens?: number | null }
  | { kind: "client_closed" }
  | { kind: "client_stalled" }
  | { kind: "failed"; reason: UpstreamErrorKind; message: string };

export interface RelayOpts<C> {
  source: ChunkSource<C>;
  format: StreamFormat<C>;
  /** Chunks read before the commit point (a stream's first chunk, a long JSON answer's head). */
  first: C | null;
  sse: boolean;
  /** Aborting it aborts the worker's request; its reason says why (AbortCause). */
  ac: AbortController;
  clock: Clock;
  /** Clock time by which a stream must have shown a token. */
  firstTokenDeadlineMs: number;
  /** Longest wait for the engine (after the first token) and for a reader to take a chunk. */
  idleTimeoutMs: number;
  onFirstToken: () => void;
  /** Called exactly once. */
  onEnd: (end: RelayEnd) => void;
}

/** The committed body; `onStall` lets the HTTP shell close the connection of a reader that stopped. */
export interface RelaySource<C> extends ChunkSource<C> {
  onStall(fn: () => void): void;
}

/** Text sent to the client for a mid-stream failure: herd's own words, never the runtime's. */
export function clientText(reason: UpstreamErrorKind): string {
  switch (reason) {
    case "first_token_timeout":
      return "the engine produced no first token before the deadline";
    case "idle_timeout":
      return "the engine stopped sending data";
    case "eof":
      return "the engine closed the stream before it finished";
    case "worker_down":
      return "the engine serving this request went down";
    case "shutdown":
      return "herd is shutting down";
    case "drain":
      return "the engine serving this request was stopped at its drain deadline";
    case "connect":
      return "could not connect to the engine";
    case "peer_unreachable":
      return "could not reach the peer node that runs the engine";
    case "head_timeout":
      return "the engine did not answer before the deadline";
    case "status_5xx":
      return "the engine answered with an error status";
    default:
      return "engine connection lost";
  }
}

export function relay<C>(o: RelayOpts<C>): RelaySource<C> {
  return new Relay(o);
}

class Relay<C> implements RelaySource<C> {
  private readonly scanner: ChunkScanner<C>;
  private pending: C | null;
  /** A read to the worker is outstanding (herd waits on the engine, not on the client). */
  private upstreamBusy = false;
  private waitSinceMs: number;
  private timer: TimerHandle | null = null;
  private ended = false;
  private stalled: (() => void) | null = null;
  /** The reader's callback while a read to the worker is outstanding. */
  private reader: ((r: ReadResult<C>) => void) | null = null;

  constructor(private readonly o: RelayOpts<C>) {
    this.scanner = o.sse ? o.format.scanner() : o.format.usage();
    this.pending = o.first;
    this.waitSinceMs = o.clock.now();
    if (this.pending !== null && this.scanner.push(this.pending)) o.onFirstToken();
    this.check();
  }

  read(cb: (r: ReadResult<C>) => void): void {
    if (this.ended) return cb({ done: true });
    if (this.pending !== null) {
      const chunk = this.pending;
      this.pending = null;
      this.waitSinceMs = this.o.clock.now();
      return cb({ done: false, value: chunk });
    }
    this.upstreamBusy = true;
    this.waitSinceMs = this.o.clock.now();
    this.reader = cb;
    this.o.source.read(this.fromUpstream);
  }

  cancel(): void {
    if (this.ended) return;
    // The client went away: abort the engine request so it frees its KV blocks.
    if (!this.o.ac.signal.aborted) this.o.ac.abort(new AbortCause("client", "client disconnected"));
    this.o.source.cancel();
    this.end({ kind: "client_closed" });
  }

  onStall(fn: () => void): void {
    this.stalled = fn;
  }

  private end(e: RelayEnd): void {
    if (this.ended) return;
    this.ended = true;
    this.timer?.cancel();
    this.o.onEnd(e);
  }

  private deadline(): number {
    const { o } = this;
    return this.upstreamBusy && !this.scanner.sawToken ? o.firstTokenDeadlineMs : this.waitSinceMs + o.idleTimeoutMs;
  }

  /** One timer re-armed lazily: it fires at the current deadline and re-checks. */
  private readonly check = (): void => {
    this.timer = null;
    if (this.ended) return;
    const { o } = this;
    const now = o.clock.now();
    const at = this.deadline();
    if (now < at) {
      if (at !== Infinity) this.timer = o.clock.setTimer(at - now, this.check);
      return;
    }
    if (this.upstreamBusy) {
      o.ac.abort(
        this.scanner.sawToken
          ? new AbortCause("idle_timeout", `no data from the engine for ${o.idleTimeoutMs} ms`)
          : new AbortCause("first_token_timeout", "no first token before the deadline"),
      );
      return;
    }
    // herd holds a chunk the reader has not asked for: the client stopped reading.
    o.ac.abort(new AbortCause("client_stalled", `client did not read for ${o.idleTimeoutMs} ms`));
    o.source.cancel();
    this.end({ kind: "client_stalled" });
    this.stalled?.();
  };

  private failure(): RelayEnd {
    const cause = this.o.ac.signal.reason;
    if (this.o.ac.signal.aborted && cause instanceof AbortCause) {
      if (cause.kind === "client") return { kind: "client_closed" };
      if (cause.kind === "client_stalled") return { kind: "client_stalled" };
      // An orchestrated plan cancels a committed leg only because the request is over.
      if (cause.kind === "plan") return { kind: "client_closed" };
      return { kind: "failed", reason: cause.kind, message: cause.message };
    }
    return { kind: "failed", reason: "reset", message: "engine connection lost" };
  }

  private readonly fromUpstream = (r: ReadResult<C>): void => {
    const { o } = this;
    const cb = this.reader!;
    this.reader = null;
    this.upstreamBusy = false;
    this.waitSinceMs = o.clock.now();
    if (this.ended) return cb({ done: true });
    if ("error" in r) return cb(this.failed(r));
    if (r.done) {
      if (o.sse && !this.scanner.ended) {
        this.end({ kind: "failed", reason: "eof", message: "the engine closed the stream before it finished" });
        return cb({ done: false, value: o.format.errorEvent(clientText("eof"), "upstream_eof") });
      }
      this.end({ kind: "complete", cachedTokens: this.scanner.cachedTokens, outputTokens: this.scanner.outputTokens ?? null });
      return cb({ done: true });
    }
    if (this.scanner.push(r.value)) o.onFirstToken();
    cb(r);
  };

  /** The worker's body failed: an error event for a stream (then the end), an error for a piped body. */
  private failed(r: ReadResult<C>): ReadResult<C> {
    const f = this.failure();
    this.end(f);
    if (f.kind !== "failed") return { done: true };
    return this.o.sse ? { done: false, value: this.o.format.errorEvent(f.message, `upstream_${f.reason}`) } : r;
  }
}
