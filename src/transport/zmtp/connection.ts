// One ZMTP connection over a TCP socket: NULL handshake, our own output queue (Bun's write() is
// unbuffered and may accept only part of a buffer), heartbeats, and error isolation — nothing a
// peer sends can throw out of the event loop; malformed input closes the connection with a log line.
import type { Clock, TimerHandle } from "../../core/clock.ts";
import { errorMessage } from "../../core/errors.ts";
import type { Logger } from "../../core/log.ts";
import { ZmtpDecoder } from "./decoder.ts";
import type { ResolvedOptions } from "./options.ts";
import { OutQueue } from "./out-queue.ts";
import {
  type PeerGreeting,
  type SocketType,
  ZmtpProtocolError,
  buildGreeting,
  compatibleSocketTypes,
  encodePing,
  encodePong,
  encodeReady,
  parseProperties,
} from "./protocol.ts";

/** The part of a Bun TCP socket we use (a fake implements it in unit tests). */
export interface RawSocket {
  write(data: Uint8Array): number;
  end(): void;
  pause?(): void;
  resume?(): void;
}

/** What a socket type (PUB, SUB, …) does with a connection's events. */
export interface ConnectionOwner {
  readonly type: SocketType;
  /** Sent in READY for DEALER/ROUTER/REQ (libzmq sends it, possibly empty, only for those). */
  readonly readyIdentity: Uint8Array | undefined;
  connReady(c: ZmtpConnection): void;
  connMessage(c: ZmtpConnection, frames: Uint8Array[]): void;
  connSubscription(c: ZmtpConnection, topic: Uint8Array, subscribe: boolean): void;
  connClosed(c: ZmtpConnection, reason: string, protocolError: boolean): void;
}

const te = new TextDecoder();

export class ZmtpConnection {
  state: "handshake" | "ready" | "closed" = "handshake";
  peerMinor = 0;
  peerType = "";
  peerIdentity: Uint8Array = new Uint8Array(0);
  /** Set by a ROUTER owner: the routing id this peer is known by. */
  routingId: Uint8Array | undefined;
  private gotGreeting = false;
  private readonly decoder: ZmtpDecoder;
  private readonly out: OutQueue;
  private lastRecvAtMs: number;
  private handshakeTimer: TimerHandle | undefined;
  private heartbeatTimer: TimerHandle | undefined;
  private heartbeatTimeoutTimer: TimerHandle | undefined;
  private peerTtlTimer: TimerHandle | undefined;

  constructor(
    private readonly sock: RawSocket,
    private readonly owner: ConnectionOwner,
    private readonly opts: ResolvedOptions,
    private readonly log: Logger,
    private readonly clock: Clock,
    /** "endpoint peer-address", for log lines. */
    readonly label: string,
  ) {
    this.lastRecvAtMs = clock.now();
    this.out = new OutQueue(sock);
    this.decoder = new ZmtpDecoder(
      {
        greeting: (g) => this.onGreeting(g),
        command: (name, data) => this.onCommand(name, data),
        message: (frames) => this.onMessageFrames(frames),
      },
      { maxMessageBytes: opts.maxMessageBytes, maxFrames: opts.maxFrames },
    );
  }

  /** Send greeting and READY together at once (never wait for the peer's greeting first). */
  start(): void {
    const greeting = buildGreeting(1);
    const ready = encodeReady(this.owner.type, this.owner.readyIdentity);
    const both = new Uint8Array(greeting.length + ready.length);
    both.set(greeting);
    both.set(ready, greeting.length);
    this.write(both);
    if (this.opts.handshakeTimeoutMs > 0) {
      this.handshakeTimer = this.clock.setTimer(this.opts.handshakeTimeoutMs, () => {
        if (this.state === "handshake") this.fail(`handshake not finished after ${this.opts.handshakeTimeoutMs} ms`);
      });
    }
  }

  get queuedMessages(): number {
    return this.out.messages;
  }

  get queuedBytes(): number {
    return this.out.bytes;
  }

  /** Whether one more message of `bytes` fits under the send high-water marks. */
  hasRoom(bytes: number): boolean {
    if (this.state !== "ready") return false;
    const q = this.out.messages;
    if (q === 0) return true; // one message always fits, however large
    return q < this.opts.sndHwm && this.out.bytes + bytes <= this.opts.sndHwmBytes;
  }

  /** Queue one encoded message (or command). Only after the handshake, except greeting/READY. */
  write(buf: Uint8Array): void {
    if (this.state === "closed") return;
    if (!this.out.write(buf)) this.close("write on a closed socket");
  }

  /** Bun's drain: the kernel has room again; continue with the unsent tail. */
  onDrain(): void {
    if (this.state === "closed") return;
    if (!this.out.drain()) this.close("write on a closed socket");
  }

  onData(chunk: Uint8Array): void {
    if (this.state === "closed") return;
    this.lastRecvAtMs = this.clock.now();
    try {
      this.decoder.push(chunk);
    } catch (e) {
      if (e instanceof ZmtpProtocolError) this.fail(e.message);
      else this.fail(`decoder failure: ${errorMessage(e)}`);
    }
  }

  /** Receive backpressure: stop decoding (and reading from TCP) until resumeReading(). */
  pauseReading(): void {
    if (this.state === "closed" || this.decoder.isPaused) return;
    this.decoder.pause();
    this.sock.pause?.();
  }

  resumeReading(): void {
    if (this.state === "closed" || !this.decoder.isPaused) return;
    this.sock.resume?.();
    try {
      this.decoder.resume();
    } catch (e) {
      this.fail(e instanceof ZmtpProtocolError ? e.message : `decoder failure: ${errorMessage(e)}`);
    }
  }

  onSocketClosed(err?: Error): void {
    this.close(err ? `socket error: ${err.message}` : "connection closed by peer");
  }

  /** A protocol violation: log it clearly and close. */
  fail(reason: string): void {
    if (this.state === "closed") return;
    this.log.warn("zmtp protocol error, closing connection", { conn: this.label, reason, buffered_bytes: this.decoder.bufferedBytes });
    this.close(reason, true);
  }

  close(reason: string, protocolError = false): void {
    if (this.state === "closed") return;
    this.state = "closed";
    for (const t of [this.handshakeTimer, this.heartbeatTimer, this.heartbeatTimeoutTimer, this.peerTtlTimer]) t?.cancel();
    this.decoder.stop();
    this.out.clear();
    try {
      this.sock.end();
    } catch {
      // already closed
    }
    this.owner.connClosed(this, reason, protocolError);
  }

  private onGreeting(g: PeerGreeting): void {
    this.gotGreeting = true;
    this.peerMinor = g.major > 3 ? 1 : g.minor;
  }

  private onCommand(name: string, data: Uint8Array): void {
    if (this.state === "handshake") {
      if (name === "READY") return this.onReady(data);
      if (name === "ERROR") throw new ZmtpProtocolError(`peer refused the handshake: ERROR ${JSON.stringify(errorReason(data))}`);
      throw new ZmtpProtocolError(`expected READY, got command ${JSON.stringify(name)}`);
    }
    if (this.state !== "ready") return;
    switch (name) {
      case "PING":
        return this.onPing(data);
      case "PONG":
        return; // liveness already noted
      case "SUBSCRIBE":
      case "CANCEL":
        return this.guard(() => this.owner.connSubscription(this, data, name === "SUBSCRIBE"));
      case "ERROR":
        throw new ZmtpProtocolError(`peer sent ERROR ${JSON.stringify(errorReason(data))}`);
      case "READY":
        throw new ZmtpProtocolError("second READY after the handshake");
      default:
        return; // unknown commands are dropped, as libzmq does
    }
  }

  private onReady(data: Uint8Array): void {
    if (!this.gotGreeting) throw new ZmtpProtocolError("READY before greeting");
    const props = parseProperties(data);
    const type = props.get("socket-type");
    if (type !== undefined) {
      this.peerType = te.decode(type);
      if (!compatibleSocketTypes(this.owner.type, this.peerType)) {
        throw new ZmtpProtocolError(`incompatible socket type: we are ${this.owner.type}, peer is ${this.peerType}`);
      }
    }
    const identity = props.get("identity");
    if (identity !== undefined) {
      if (identity.length > 255) throw new ZmtpProtocolError(`identity of ${identity.length} bytes (max 255)`);
      this.peerIdentity = identity.slice();
    }
    this.state = "ready";
    this.handshakeTimer?.cancel();
    this.handshakeTimer = undefined;
    this.startHeartbeat();
    this.guard(() => this.owner.connReady(this));
  }

  private onMessageFrames(frames: Uint8Array[]): void {
    if (this.state === "handshake") throw new ZmtpProtocolError("message before the peer's READY");
    if (this.state !== "ready") return;
    // Inline try (not guard()): this runs per message and a closure per call shows in profiles.
    try {
      this.owner.connMessage(this, frames);
    } catch (e) {
      this.log.error("zmtp: message handler threw; message dropped", { conn: this.label, error: errorMessage(e) });
    }
  }

  /** Run an owner callback; an application error is logged and must not corrupt framing. */
  private guard(fn: () => void): void {
    try {
      fn();
    } catch (e) {
      this.log.error("zmtp: message handler threw; message dropped", { conn: this.label, error: errorMessage(e) });
    }
  }

  private onPing(data: Uint8Array): void {
    if (data.length < 2) throw new ZmtpProtocolError("PING shorter than its TTL field");
    this.write(encodePong(data.subarray(2)));
    const ttlMs = ((data[0]! << 8) | data[1]!) * 100;
    this.peerTtlTimer?.cancel();
    this.peerTtlTimer = undefined;
    if (ttlMs > 0) {
      // The peer promises traffic within its TTL (as libzmq: any frame counts); close if none comes.
      const at = this.lastRecvAtMs;
      this.peerTtlTimer = this.clock.setTimer(ttlMs, () => {
        if (this.lastRecvAtMs <= at) this.close(`peer silent past its heartbeat TTL of ${ttlMs} ms`);
      });
    }
  }

  private startHeartbeat(): void {
    const ivl = this.opts.heartbeatIvlMs;
    if (ivl <= 0 || this.peerMinor < 1) return; // PING is a 3.1 command
    const tick = (): void => {
      if (this.state !== "ready") return;
      const sentAt = this.clock.now();
      this.write(encodePing(this.opts.heartbeatTtlMs));
      // One outstanding deadline at a time: re-arming on every PING would postpone it forever
      // whenever the timeout is longer than the interval.
      this.heartbeatTimeoutTimer ??= this.clock.setTimer(this.opts.heartbeatTimeoutMs, () => {
        this.heartbeatTimeoutTimer = undefined;
        if (this.lastRecvAtMs < sentAt) this.close(`no traffic within ${this.opts.heartbeatTimeoutMs} ms of our PING`);
      });
      this.heartbeatTimer = this.clock.setTimer(ivl, tick);
    };
    this.heartbeatTimer = this.clock.setTimer(ivl, tick);
  }
}

function errorReason(data: Uint8Array): string {
  const n = data[0] ?? 0;
  return te.decode(data.subarray(1, 1 + n));
}
