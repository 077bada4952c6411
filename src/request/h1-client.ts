// A pooled keep-alive HTTP/1.1 client over Bun.connect for engine legs (http:// only; TLS peers keep
// `fetch`). Why not fetch: on a zero-delay engine the native fetch was ~36 % of herd's CPU samples
// (docs/benchmarks.md "Issue 25 speed targets"): a Request, a Headers, a Response, a ReadableStream
// and several promises per leg. Here a leg is one write of the request and a parse of the answer as
// it arrives: status line, headers (content-type, content-length, transfer-encoding, connection),
// a body framed by Content-Length, chunked encoding (RFC 9112 §7.1) or the connection's close.
//
// Bounds: at most `maxConnsPerOrigin` open connections per origin (beyond it the caller falls back
// to fetch, whose own pool is bounded), at most `maxIdlePerOrigin` of them idle, an idle connection
// is not reused after `idleReuseMs` (uvicorn, which vLLM and SGLang serve with, closes idle
// keep-alive connections after 5 s: timeout_keep_alive), body bytes buffered for a reader that does
// not read are bounded by pausing the socket past BODY_HIGH_WATER_BYTES. A connection that is not
// known to be clean (abort, cancel, error, a body not read to its end, `connection: close`) is
// closed, never reused.
//
// Errors (what the lifecycle, src/request/lifecycle.ts, and the outlier ejection expect of an
// Upstream): no answer head → `reply({ error, kind: "connect" })` (connect refused, connect
// deadline, reset or close before the head); a reused connection that the engine closed before
// sending a byte is retried once on a fresh one (a race with its idle close, not a dead engine);
// after the head, a failure is an error of the body's `read`. Aborting the signal fails whatever
// is pending with the signal's reason and closes the connection.
import type { Socket } from "bun";
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { ChunkSource, LegError, LegReply, ReadResult } from "./upstream.ts";

export interface H1PoolOptions {
  clock: Clock;
  /** TCP connect deadline (the engine's port is on this host or the next rack). */
  connectTimeoutMs?: number;
  maxConnsPerOrigin?: number;
  maxIdlePerOrigin?: number;
  idleReuseMs?: number;
}

export interface H1Request {
  host: string;
  port: number;
  /** Request line and headers without Content-Length and the blank line. */
  head: string;
  body: string;
  /** Read a body with a declared length ≤ this as one chunk (a non-streamed leg). */
  wholeMaxBytes: number;
}

/** Past this many body bytes waiting for the reader the socket stops reading (TCP backpressure). */
export const BODY_HIGH_WATER_BYTES = 1 << 20;
/** Response heads are at most this big (Bun's and Node's HTTP servers refuse bigger request heads too). */
export const HEAD_MAX_BYTES = 64 * 1024;

const CRLF2 = Buffer.from("\r\n\r\n");
const CRLF = Buffer.from("\r\n");

interface Origin {
  key: string;
  host: string;
  port: number;
  open: number;
  idle: Conn[];
}

type Phase = "head" | "length" | "chunk-size" | "chunk-data" | "chunk-crlf" | "trailers" | "close" | "done";

/** One request/response on a connection: the head callback, then the body as a ChunkSource. */
class Exchange implements ChunkSource<Uint8Array> {
  chunks: Uint8Array[] = [];
  buffered = 0;
  ended = false;
  error: unknown = undefined;
  headSent = false;
  gotBytes = false;
  pending: ((r: ReadResult<Uint8Array>) => void) | null = null;
  whole: Uint8Array | null = null;
  wholeAt = 0;
  onAbort: (() => void) | null = null;
  constructor(
    readonly conn: Conn,
    readonly req: H1Request,
    readonly signal: AbortSignal,
    readonly reply: (r: LegReply<Uint8Array> | LegError) => void,
    readonly retry: (() => void) | null,
  ) {}

  read(cb: (r: ReadResult<Uint8Array>) => void): void {
    if (this.chunks.length > 0) {
      const value = this.chunks.shift()!;
      this.buffered -= value.byteLength;
      if (this.buffered < BODY_HIGH_WATER_BYTES) this.conn.resume();
      return cb({ done: false, value });
    }
    if (this.error !== undefined) return cb({ done: false, error: this.error });
    if (this.ended) return cb({ done: true });
    this.pending = cb;
    this.conn.resume();
  }

  cancel(): void {
    if (!this.ended || this.error !== undefined) this.conn.destroy();
    this.chunks = [];
    this.buffered = 0;
  }

  push(value: Uint8Array): void {
    if (this.whole) {
      this.whole.set(value, this.wholeAt);
      this.wholeAt += value.byteLength;
      return;
    }
    const p = this.pending;
    if (p) {
      this.pending = null;
      return p({ done: false, value });
    }
    this.chunks.push(value);
    this.buffered += value.byteLength;
    if (this.buffered >= BODY_HIGH_WATER_BYTES) this.conn.pause();
  }

  end(): void {
    if (this.whole) {
      const w = this.whole;
      this.whole = null;
      if (w.byteLength > 0) this.push(w);
    }
    this.ended = true;
    this.detach();
    const p = this.pending;
    this.pending = null;
    p?.({ done: true });
  }

  fail(error: unknown): void {
    if (this.ended) return;
    this.ended = true;
    this.error = error;
    this.detach();
    if (!this.headSent) {
      this.headSent = true;
      return this.reply({ error });
    }
    const p = this.pending;
    this.pending = null;
    p?.({ done: false, error });
  }

  detach(): void {
    if (this.onAbort) this.signal.removeEventListener("abort", this.onAbort);
    this.onAbort = null;
  }
}

class Conn {
  sock: Socket<Conn> | null = null;
  x: Exchange | null = null;
  phase: Phase = "head";
  buf: Uint8Array = new Uint8Array(0);
  left = 0;
  keepAlive = true;
  reused = false;
  dead = false;
  paused = false;
  idleSinceMs = 0;
  /** Counted in its origin's `open`. */
  counted = true;
  private unwritten: Uint8Array | null = null;
  constructor(
    readonly pool: H1Pool,
    readonly origin: Origin,
  ) {}

  start(x: Exchange, bytes: Uint8Array): void {
    this.x = x;
    this.phase = "head";
    this.buf = new Uint8Array(0);
    this.keepAlive = true;
    this.write(bytes);
  }

  write(bytes: Uint8Array): void {
    const n = this.sock!.write(bytes);
    this.unwritten = n < bytes.byteLength ? bytes.subarray(Math.max(0, n)) : null;
  }

  drain(): void {
    if (this.unwritten) this.write(this.unwritten);
  }

  pause(): void {
    if (!this.paused && this.sock && !this.dead) (this.paused = true), this.sock.pause();
  }

  resume(): void {
    if (this.paused && this.sock && !this.dead) (this.paused = false), this.sock.resume();
  }

  destroy(): void {
    if (this.dead) return;
    this.dead = true;
    this.pool.forget(this);
    this.sock?.terminate();
  }

  /** The socket closed or failed. */
  gone(error: unknown): void {
    const wasDead = this.dead;
    this.dead = true;
    this.pool.forget(this);
    const x = this.x;
    this.x = null;
    if (!x || wasDead) return x?.fail(error);
    if (this.phase === "close") return x.end();
    if (!x.gotBytes && this.reused && x.retry && !x.signal.aborted) {
      x.detach();
      return x.retry();
    }
    x.fail(error instanceof Error ? error : new Error(`engine connection closed ${x.headSent ? "mid-body" : "before the response head"}`));
  }

  data(d: Uint8Array): void {
    const x = this.x;
    if (!x || this.dead) return this.destroy(); // bytes nobody asked for: the connection is not clean
    x.gotBytes = true;
    let b = d;
    if (this.buf.byteLength > 0) {
      const j = new Uint8Array(this.buf.byteLength + d.byteLength);
      j.set(this.buf);
      j.set(d, this.buf.byteLength);
      b = j;
      this.buf = new Uint8Array(0);
    }
    let i = 0;
    while (i < b.byteLength && this.x === x && !this.dead) {
      const used = this.step(x, b, i);
      if (used < 0) {
        this.buf = b.slice(i); // an incomplete line: keep it for the next read
        if (this.buf.byteLength > HEAD_MAX_BYTES) this.fatal(x, new Error("engine response head or chunk line over 64 KiB"));
        return;
      }
      i += used;
    }
    if (i < b.byteLength && this.x !== x && !this.dead) this.destroy(); // bytes after the response
  }

  /** Consume from b at i; bytes used, or -1 when a line is incomplete. */
  private step(x: Exchange, b: Uint8Array, i: number): number {
    switch (this.phase) {
      case "head": {
        const at = Buffer.from(b.buffer, b.byteOffset, b.byteLength).indexOf(CRLF2, i);
        if (at < 0) return -1;
        this.head(x, Buffer.from(b.buffer, b.byteOffset + i, at - i).toString("latin1"));
        return at + 4 - i;
      }
      case "length":
      case "chunk-data": {
        const n = Math.min(this.left, b.byteLength - i);
        x.push(x.whole ? b.subarray(i, i + n) : b.slice(i, i + n));
        this.left -= n;
        if (this.left === 0) {
          if (this.phase === "length") this.finish(x);
          else this.phase = "chunk-crlf";
        }
        return n;
      }
      case "close":
        x.push(b.slice(i));
        return b.byteLength - i;
      case "chunk-crlf":
      case "chunk-size":
      case "trailers": {
        const at = Buffer.from(b.buffer, b.byteOffset, b.byteLength).indexOf(CRLF, i);
        if (at < 0) return -1;
        const line = Buffer.from(b.buffer, b.byteOffset + i, at - i).toString("latin1");
        if (this.phase === "chunk-crlf") {
          if (line !== "") return this.fatal(x, new Error("malformed chunked body"));
          this.phase = "chunk-size";
        } else if (this.phase === "chunk-size") {
          const size = Number.parseInt(line.split(";", 1)[0]!.trim(), 16);
          if (!Number.isFinite(size) || size < 0 || !/^[0-9a-fA-F]+$/.test(line.split(";", 1)[0]!.trim())) return this.fatal(x, new Error("malformed chunk size"));
          if (size === 0) this.phase = "trailers";
          else (this.phase = "chunk-data"), (this.left = size);
        } else if (line === "") this.finish(x);
        return at + 2 - i;
      }
      case "done":
        return b.byteLength - i;
    }
  }

  private head(x: Exchange, text: string): void {
    const lines = text.split("\r\n");
    const m = /^HTTP\/1\.([01]) (\d{3})/.exec(lines[0]!);
    if (!m) return void this.fatal(x, new Error("malformed engine response status line"));
    const status = Number(m[2]);
    if (status >= 100 && status < 200) return; // 100 Continue and friends: the real head follows
    let contentType: string | null = null;
    let length: number | null = null;
    let chunked = false;
    let conn = "";
    for (let k = 1; k < lines.length; k++) {
      const l = lines[k]!;
      const c = l.indexOf(":");
      if (c <= 0) continue;
      const name = l.slice(0, c).trim().toLowerCase();
      const value = l.slice(c + 1).trim();
      if (name === "content-type") contentType = value;
      else if (name === "content-length") length = /^\d+$/.test(value) ? Number(value) : NaN;
      else if (name === "transfer-encoding") chunked = value.toLowerCase().split(",").some((t) => t.trim() === "chunked");
      else if (name === "connection") conn = value.toLowerCase();
    }
    if (length !== null && Number.isNaN(length)) return void this.fatal(x, new Error("malformed engine content-length"));
    this.keepAlive = m[1] === "1" ? !conn.includes("close") : conn.includes("keep-alive");
    const noBody = status === 204 || status === 304;
    if (chunked) this.phase = "chunk-size";
    else if (noBody || length === 0) this.phase = "done";
    else if (length !== null) (this.phase = "length"), (this.left = length);
    else (this.phase = "close"), (this.keepAlive = false);
    if (this.phase === "length" && length! <= x.req.wholeMaxBytes) x.whole = new Uint8Array(length!);
    x.headSent = true;
    const contentLength = chunked ? null : noBody ? 0 : length;
    x.reply({ status, contentType, contentLength, body: this.phase === "done" ? null : x });
    if (this.phase === "done") this.finish(x);
  }

  private finish(x: Exchange): void {
    this.phase = "done";
    this.x = null;
    x.end();
    if (this.keepAlive && !this.dead && !this.unwritten) this.pool.release(this);
    else this.destroy();
  }

  private fatal(x: Exchange, e: Error): number {
    this.x = null;
    x.fail(e);
    this.destroy();
    return 0;
  }
}

export class H1Pool {
  private readonly origins = new Map<string, Origin>();
  private readonly connectTimeoutMs: number;
  private readonly maxConns: number;
  private readonly maxIdle: number;
  private readonly idleReuseMs: number;

  constructor(private readonly o: H1PoolOptions) {
    this.connectTimeoutMs = o.connectTimeoutMs ?? 5000;
    this.maxConns = o.maxConnsPerOrigin ?? 512;
    this.maxIdle = o.maxIdlePerOrigin ?? 64;
    this.idleReuseMs = o.idleReuseMs ?? 4000;
  }

  /** Open connections across origins (tests, figures). */
  get openConnections(): number {
    let n = 0;
    for (const o of this.origins.values()) n += o.open;
    return n;
  }

  /** False when the origin's connections are all in use and at the bound: send it another way. */
  request(req: H1Request, signal: AbortSignal, reply: (r: LegReply<Uint8Array> | LegError) => void): boolean {
    const origin = this.origin(req.host, req.port);
    const now = this.o.clock.now();
    let conn: Conn | undefined;
    while ((conn = origin.idle.pop())) {
      if (!conn.dead && now - conn.idleSinceMs < this.idleReuseMs) break;
      conn.destroy();
    }
    if (!conn && origin.open >= this.maxConns) return false;
    const bytes = Buffer.from(`${req.head}content-length: ${Buffer.byteLength(req.body)}\r\n\r\n${req.body}`);
    const go = (c: Conn, retry: boolean): void => {
      const x = new Exchange(c, req, signal, reply, retry ? () => this.connect(origin, (f) => go(f, false), (e) => reply({ error: e })) : null);
      if (signal.aborted) return x.fail(signal.reason);
      x.onAbort = () => {
        c.x = null;
        x.fail(signal.reason);
        c.destroy();
      };
      signal.addEventListener("abort", x.onAbort, { once: true });
      c.start(x, bytes);
    };
    if (conn) {
      conn.reused = true;
      go(conn, true);
    } else this.connect(origin, (c) => go(c, false), (e) => reply({ error: e }));
    return true;
  }

  /** Close idle connections (shutdown, tests). */
  close(): void {
    for (const o of this.origins.values()) for (const c of o.idle.splice(0)) c.destroy();
  }

  release(c: Conn): void {
    if (c.origin.idle.length >= this.maxIdle) return c.destroy();
    c.idleSinceMs = this.o.clock.now();
    c.origin.idle.push(c);
  }

  /** The connection is gone (closed, failed, destroyed): out of the idle list and the open count, once. */
  forget(c: Conn): void {
    const i = c.origin.idle.indexOf(c);
    if (i >= 0) c.origin.idle.splice(i, 1);
    if (!c.counted) return;
    c.counted = false;
    c.origin.open--;
  }

  private origin(host: string, port: number): Origin {
    const key = `${host}:${port}`;
    let o = this.origins.get(key);
    if (!o) this.origins.set(key, (o = { key, host, port, open: 0, idle: [] }));
    return o;
  }

  private connect(origin: Origin, ok: (c: Conn) => void, fail: (e: Error) => void): void {
    const c = new Conn(this, origin);
    origin.open++;
    let settled = false;
    const timer: TimerHandle = this.o.clock.setTimer(this.connectTimeoutMs, () => {
      if (settled) return;
      settled = true;
      c.dead = true;
      this.forget(c);
      fail(new Error(`connect to ${origin.key} timed out after ${this.connectTimeoutMs} ms`));
    });
    Bun.connect<Conn>({
      hostname: origin.host,
      port: origin.port,
      data: c,
      socket: HANDLERS,
    }).then(
      (s) => {
        if (settled) return void s.terminate();
        settled = true;
        timer.cancel();
        c.sock = s;
        s.setNoDelay?.(true);
        ok(c);
      },
      (e: unknown) => {
        if (settled) return;
        settled = true;
        timer.cancel();
        c.dead = true;
        this.forget(c);
        fail(e instanceof Error ? e : new Error(String(e)));
      },
    );
  }
}

const HANDLERS = {
  data: (s: Socket<Conn>, d: Uint8Array) => s.data.data(d),
  drain: (s: Socket<Conn>) => s.data.drain(),
  close: (s: Socket<Conn>) => s.data.gone(new Error("engine connection closed")),
  error: (s: Socket<Conn>, e: Error) => s.data.gone(e),
  end: (s: Socket<Conn>) => s.data.gone(new Error("engine connection closed")),
};
