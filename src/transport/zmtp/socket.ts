// What every ZMTP socket type shares: connect (with reconnect and exponential backoff) and bind on
// Bun TCP, the set of handshaken peers, receive delivery (callback or bounded async iterator), and
// close(). Subclasses (pub.ts, sub.ts, dealer.ts, router.ts) add the pattern's routing.
import type { Socket, TCPSocketListener } from "bun";
import { type Clock, RealClock, type TimerHandle } from "../../core/clock.ts";
import { errorMessage } from "../../core/errors.ts";
import { type Logger, createLogger } from "../../core/log.ts";
import { type Rng, SeededRng } from "../../core/rng.ts";
import { entropySeed } from "../../core/seed.ts";
import { type ConnectionOwner, ZmtpConnection } from "./connection.ts";
import { type ResolvedOptions, type ZmtpEvent, type ZmtpOptions, formatEndpoint, parseEndpoint, resolveOptions } from "./options.ts";
import type { SocketType } from "./protocol.ts";
import { toBytes } from "./protocol.ts";
import { RecvQueue } from "./recv-queue.ts";
import { Dialer } from "./dialer.ts";

export interface ConnBox {
  conn?: ZmtpConnection;
}
export type BunSocket = Socket<ConnBox>;

export interface SocketStats {
  messagesIn: number;
  messagesOut: number;
  /** Messages dropped: PUB/ROUTER at a peer's HWM, ROUTER to an unknown identity. */
  dropped: number;
  connects: number;
  disconnects: number;
  protocolErrors: number;
}

export abstract class ZmtpSocket<T> implements ConnectionOwner, AsyncIterable<T> {
  readonly readyIdentity: Uint8Array | undefined;
  readonly stats: SocketStats = { messagesIn: 0, messagesOut: 0, dropped: 0, connects: 0, disconnects: 0, protocolErrors: 0 };
  protected readonly opts: ResolvedOptions;
  protected readonly log: Logger;
  protected readonly clock: Clock;
  protected readonly rng: Rng;
  /** Handshaken peers, in the order they became ready. */
  protected readonly peers: ZmtpConnection[] = [];
  protected handler: ((item: T) => void) | undefined;
  private readonly queue: RecvQueue<T>;
  private readingPaused = false;
  private readonly dialers: Dialer[] = [];
  private readonly listeners: TCPSocketListener<ConnBox>[] = [];
  private readonly accepted = new Set<ZmtpConnection>();
  private readyWaiters: (() => void)[] = [];
  private readonly onEvent: ((e: ZmtpEvent) => void) | undefined;
  protected closed = false;

  constructor(
    readonly type: SocketType,
    o: ZmtpOptions,
    sendsIdentity: boolean,
  ) {
    this.opts = resolveOptions(o);
    this.log = (o.log ?? createLogger("herd")).child(`zmtp.${type.toLowerCase()}`);
    this.clock = o.clock ?? new RealClock();
    // Reconnect jitter only; callers that replay runs pass their own seeded stream (src/kv/zmtp-source.ts).
    this.rng = o.rng ?? new SeededRng(entropySeed());
    this.onEvent = o.onEvent;
    const id = o.identity === undefined ? new Uint8Array(0) : toBytes(o.identity);
    if (id.length > 255 || id[0] === 0) throw new RangeError("zmtp identity must be 0..255 bytes and not start with a zero byte");
    this.readyIdentity = sendsIdentity ? id : undefined;
    this.queue = new RecvQueue<T>(this.opts.rcvHwm, (paused) => this.setReadingPaused(paused));
  }

  /** Number of peers that finished the handshake. */
  get readyPeers(): number {
    return this.peers.length;
  }

  /** Resolves once at least one peer is ready, or rejects after `timeoutMs`. */
  whenReady(timeoutMs = 5000): Promise<void> {
    if (this.peers.length > 0) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const done = (): void => {
        timer.cancel();
        resolve();
      };
      const timer = this.clock.setTimer(timeoutMs, () => {
        this.readyWaiters = this.readyWaiters.filter((w) => w !== done);
        reject(new Error(`zmtp ${this.type}: no peer ready within ${timeoutMs} ms`));
      });
      this.readyWaiters.push(done);
    });
  }

  /** Connect to `tcp://host:port`; reconnects with backoff until close(). */
  connect(endpoint: string): void {
    if (this.closed) throw new Error(`zmtp ${this.type}: socket is closed`);
    const d = new Dialer(this, endpoint, parseEndpoint(endpoint));
    this.dialers.push(d);
    d.dial();
  }

  /** Listen on `tcp://host:port` (port 0 or * = any); returns the bound endpoint with its real port. */
  bind(endpoint: string): string {
    if (this.closed) throw new Error(`zmtp ${this.type}: socket is closed`);
    const { host, port } = parseEndpoint(endpoint);
    let bound = endpoint;
    let listener: TCPSocketListener<ConnBox>;
    try {
      listener = Bun.listen<ConnBox>({
        hostname: host,
        port,
        data: {},
        socket: this.handlers(() => bound, (s) => {
          if (this.closed) return undefined;
          const c = this.newConnection(s, `${bound} <- ${s.remoteAddress}:${s.remotePort}`);
          this.accepted.add(c);
          return c;
        }),
      });
    } catch (e) {
      throw new Error(`zmtp ${this.type}: cannot bind ${endpoint}: ${errorMessage(e)}`);
    }
    this.listeners.push(listener);
    bound = formatEndpoint(host, listener.port);
    this.emit({ type: "listening", endpoint: bound });
    return bound;
  }

  /** Close every connection, listener and timer; the async iterator ends. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const d of this.dialers) d.stop();
    for (const l of this.listeners) l.stop(true);
    for (const c of [...this.accepted]) c.close("socket closed");
    this.queue.end();
    this.emit({ type: "closed", endpoint: "" });
  }

  [Symbol.asyncIterator](): AsyncIterator<T> {
    return this.queue;
  }

  /** The next received item, or undefined after `timeoutMs` (for request/reply style callers). */
  recv(timeoutMs = 5000): Promise<T | undefined> {
    return this.queue.recv(timeoutMs, (ms, fn) => this.clock.setTimer(ms, fn));
  }

  // ConnectionOwner ---------------------------------------------------------------------------

  connReady(c: ZmtpConnection): void {
    this.peers.push(c);
    this.stats.connects++;
    if (this.readingPaused) c.pauseReading();
    for (const d of this.dialers) if (d.owns(c)) d.connectionReady();
    this.emit({ type: "ready", endpoint: c.label, peer: c.peerType });
    this.peerReady(c);
    for (const w of this.readyWaiters.splice(0)) w();
  }

  connMessage(c: ZmtpConnection, frames: Uint8Array[]): void {
    this.stats.messagesIn++;
    this.peerMessage(c, frames);
  }

  connSubscription(_c: ZmtpConnection, _topic: Uint8Array, _subscribe: boolean): void {
    // Only PUB cares; other types ignore (libzmq's session drops unexpected commands).
  }

  connClosed(c: ZmtpConnection, reason: string, protocolError: boolean): void {
    this.accepted.delete(c);
    const i = this.peers.indexOf(c);
    if (i >= 0) {
      this.peers.splice(i, 1);
      this.stats.disconnects++;
      this.peerClosed(c);
    }
    if (protocolError) this.stats.protocolErrors++;
    for (const d of this.dialers) d.connectionClosed(c, protocolError);
    this.emit({ type: protocolError ? "protocol_error" : "disconnected", endpoint: c.label, reason });
  }

  // For subclasses ------------------------------------------------------------------------------

  protected abstract peerReady(c: ZmtpConnection): void;
  protected abstract peerMessage(c: ZmtpConnection, frames: Uint8Array[]): void;
  protected peerClosed(_c: ZmtpConnection): void {}

  /** Hand a received item to the callback, or to the bounded iterator queue. */
  protected deliver(item: T): void {
    if (this.handler) this.handler(item);
    else this.queue.push(item);
  }

  private setReadingPaused(paused: boolean): void {
    this.readingPaused = paused;
    for (const c of [...this.peers]) paused ? c.pauseReading() : c.resumeReading();
  }

  emit(e: ZmtpEvent): void {
    if (!this.onEvent) return;
    try {
      this.onEvent(e);
    } catch (err) {
      this.log.error("zmtp: onEvent handler threw", { error: errorMessage(err) });
    }
  }

  newConnection(s: BunSocket, label: string): ZmtpConnection {
    s.setNoDelay(true);
    return new ZmtpConnection(s as unknown as import("./connection.ts").RawSocket, this, this.opts, this.log, this.clock, label);
  }

  /** Bun socket handlers; `open` makes the connection (or returns undefined to refuse it). */
  handlers(endpoint: () => string, open: (s: BunSocket) => ZmtpConnection | undefined) {
    return {
      binaryType: "uint8array" as const,
      open: (s: BunSocket) => {
        try {
          const c = open(s);
          if (!c) {
            s.end();
            return;
          }
          s.data = { conn: c };
          this.emit({ type: "connected", endpoint: endpoint(), peer: `${s.remoteAddress}:${s.remotePort}` });
          c.start();
        } catch (e) {
          // Never let an exception escape into Bun's event loop.
          this.log.error("zmtp: failed to set up a connection", { endpoint: endpoint(), error: errorMessage(e) });
          s.data?.conn?.close("setup failed");
          s.end();
        }
      },
      data: (s: BunSocket, chunk: Uint8Array) => s.data?.conn?.onData(chunk),
      drain: (s: BunSocket) => s.data?.conn?.onDrain(),
      close: (s: BunSocket, err?: Error) => s.data?.conn?.onSocketClosed(err),
      error: (s: BunSocket, err: Error) => s.data?.conn?.onSocketClosed(err),
    };
  }

  jitter(): number {
    return this.rng.float();
  }

  timer(ms: number, fn: () => void): TimerHandle {
    return this.clock.setTimer(ms, fn);
  }

  get options(): ResolvedOptions {
    return this.opts;
  }
}
