// Socket options shared by every ZMTP socket type, with libzmq-like defaults, and the pure
// reconnect backoff rule.
import type { Clock } from "../../core/clock.ts";
import type { Logger } from "../../core/log.ts";
import type { Rng } from "../../core/rng.ts";

export interface ZmtpEvent {
  type: "listening" | "connected" | "ready" | "disconnected" | "connect_failed" | "protocol_error" | "closed";
  /** The endpoint we connect to or bind on. */
  endpoint: string;
  /** The remote address ("host:port") when a connection is involved. */
  peer?: string;
  reason?: string;
}

export interface ZmtpOptions {
  log?: Logger;
  clock?: Clock;
  /** Seeds reconnect jitter and generated ROUTER identities. */
  rng?: Rng;
  /** Messages queued per peer before PUB/ROUTER drop and DEALER refuses (libzmq ZMQ_SNDHWM). Default 1000. */
  sndHwm?: number;
  /** Bytes queued per peer before the same happens, so huge messages stay bounded too. Default 64 MiB. */
  sndHwmBytes?: number;
  /** Received messages buffered for the async iterator before reading pauses (TCP backpressure). Default 1000. */
  rcvHwm?: number;
  /** Largest message (sum of frames) or command accepted from a peer. Default 64 MiB, at most 2 GiB. */
  maxMessageBytes?: number;
  /** Most frames in one received message. Default 4096. */
  maxFrames?: number;
  /** DEALER/ROUTER identity sent in READY (1..255 bytes, first byte not 0). Default empty. */
  identity?: Uint8Array | string;
  /** First reconnect delay (libzmq ZMQ_RECONNECT_IVL). Default 100 ms. */
  reconnectIvlMs?: number;
  /** Backoff cap: delays double per failed attempt up to this. Default 5000 ms. */
  reconnectIvlMaxMs?: number;
  /** Close a connection whose handshake has not finished after this long. Default 10000 ms. */
  handshakeTimeoutMs?: number;
  /** Send PING this often to 3.1 peers (0 = off, the default). */
  heartbeatIvlMs?: number;
  /** Close when nothing arrives this long after our PING. Default = heartbeatIvlMs. */
  heartbeatTimeoutMs?: number;
  /** TTL announced in our PINGs (the peer may close if we go quiet this long). Default 0 = none. */
  heartbeatTtlMs?: number;
  /** Connection lifecycle events (for status pages and tests). */
  onEvent?: (e: ZmtpEvent) => void;
}

export interface ResolvedOptions {
  sndHwm: number;
  sndHwmBytes: number;
  rcvHwm: number;
  maxMessageBytes: number;
  maxFrames: number;
  reconnectIvlMs: number;
  reconnectIvlMaxMs: number;
  handshakeTimeoutMs: number;
  heartbeatIvlMs: number;
  heartbeatTimeoutMs: number;
  heartbeatTtlMs: number;
}

const MAX_MESSAGE_CAP = 2 ** 31;

export function resolveOptions(o: ZmtpOptions): ResolvedOptions {
  const pos = (v: number | undefined, d: number, name: string): number => {
    const x = v ?? d;
    if (!Number.isFinite(x) || x < 0) throw new RangeError(`zmtp option ${name} must be a non-negative number, got ${v}`);
    return x;
  };
  const heartbeatIvlMs = pos(o.heartbeatIvlMs, 0, "heartbeatIvlMs");
  return {
    sndHwm: Math.max(1, pos(o.sndHwm, 1000, "sndHwm")),
    sndHwmBytes: Math.max(1, pos(o.sndHwmBytes, 64 * 2 ** 20, "sndHwmBytes")),
    rcvHwm: Math.max(1, pos(o.rcvHwm, 1000, "rcvHwm")),
    maxMessageBytes: Math.min(MAX_MESSAGE_CAP, pos(o.maxMessageBytes, 64 * 2 ** 20, "maxMessageBytes")),
    maxFrames: Math.max(1, pos(o.maxFrames, 4096, "maxFrames")),
    reconnectIvlMs: Math.max(1, pos(o.reconnectIvlMs, 100, "reconnectIvlMs")),
    reconnectIvlMaxMs: pos(o.reconnectIvlMaxMs, 5000, "reconnectIvlMaxMs"),
    handshakeTimeoutMs: pos(o.handshakeTimeoutMs, 10_000, "handshakeTimeoutMs"),
    heartbeatIvlMs,
    heartbeatTimeoutMs: pos(o.heartbeatTimeoutMs, heartbeatIvlMs, "heartbeatTimeoutMs"),
    heartbeatTtlMs: pos(o.heartbeatTtlMs, 0, "heartbeatTtlMs"),
  };
}

/**
 * Delay before reconnect attempt `attempt` (0-based): base·2^attempt capped at max, times a jitter
 * in [0.75, 1.25) so many herd instances don't reconnect to a restarted engine in lockstep.
 */
export function reconnectDelayMs(attempt: number, baseMs: number, maxMs: number, jitter01: number): number {
  const cap = Math.max(baseMs, maxMs);
  const raw = Math.min(cap, baseMs * 2 ** Math.min(attempt, 30));
  return Math.max(1, Math.round(raw * (0.75 + jitter01 / 2)));
}

export interface Endpoint {
  host: string;
  port: number;
}

/** Parses `tcp://host:port` (host may be `*`, a name, IPv4 or `[IPv6]`; port `*` or 0 = any, for bind). */
export function parseEndpoint(endpoint: string): Endpoint {
  const m = /^tcp:\/\/(\[[^\]]+\]|[^:/\s]+):(\*|\d{1,5})$/.exec(endpoint);
  if (!m) throw new RangeError(`bad ZMQ endpoint ${JSON.stringify(endpoint)}: expected tcp://host:port`);
  let host = m[1]!;
  if (host.startsWith("[")) host = host.slice(1, -1);
  if (host === "*") host = "0.0.0.0";
  const port = m[2] === "*" ? 0 : Number(m[2]);
  if (port > 65535) throw new RangeError(`bad port in ZMQ endpoint ${endpoint}`);
  return { host, port };
}

export function formatEndpoint(host: string, port: number): string {
  return host.includes(":") ? `tcp://[${host}]:${port}` : `tcp://${host}:${port}`;
}
