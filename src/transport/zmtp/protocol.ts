// ZMTP 3.0/3.1 wire constants and encoders (NULL mechanism only). Pure functions over bytes; the
// incremental decoder lives in decoder.ts, sockets in connection.ts. Layouts follow RFC 23/37 and
// what libzmq 4.3.4 actually sends (see docs/references.md#zmtp-1).

export const GREETING_BYTES = 64;
export const FLAG_MORE = 0x01;
export const FLAG_LONG = 0x02;
export const FLAG_COMMAND = 0x04;

export type SocketType = "PUB" | "SUB" | "XPUB" | "XSUB" | "DEALER" | "ROUTER" | "REQ" | "REP" | "PUSH" | "PULL" | "PAIR";

/** Which peer Socket-Type values each of our types accepts (libzmq mechanism.cpp check_socket_type). */
const COMPATIBLE: Record<SocketType, readonly SocketType[]> = {
  PUB: ["SUB", "XSUB"],
  XPUB: ["SUB", "XSUB"],
  SUB: ["PUB", "XPUB"],
  XSUB: ["PUB", "XPUB"],
  DEALER: ["REP", "DEALER", "ROUTER"],
  ROUTER: ["REQ", "DEALER", "ROUTER"],
  REQ: ["REP", "ROUTER"],
  REP: ["REQ", "DEALER"],
  PUSH: ["PULL"],
  PULL: ["PUSH"],
  PAIR: ["PAIR"],
};

export function compatibleSocketTypes(ours: SocketType, peer: string): boolean {
  return (COMPATIBLE[ours] as readonly string[]).includes(peer);
}

/** Thrown by the decoder and handshake on bytes that break the protocol; the connection closes. */
export class ZmtpProtocolError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ZmtpProtocolError";
  }
}

const MECHANISM_NULL = new Uint8Array(20);
MECHANISM_NULL.set([0x4e, 0x55, 0x4c, 0x4c]); // "NULL" + 16 zero bytes

/**
 * Our full 64-byte greeting, sent in one write on connect/accept: libzmq sends its own in steps and
 * waits for ours, so waiting for the peer's 64 bytes first would deadlock (docs/references.md#zmtp-1.1).
 */
export function buildGreeting(minor = 1): Uint8Array {
  const g = new Uint8Array(GREETING_BYTES);
  g[0] = 0xff;
  g[9] = 0x7f;
  g[10] = 3;
  g[11] = minor;
  g.set(MECHANISM_NULL, 12);
  g[32] = 0; // as-server: MUST be 0 for NULL
  return g;
}

export interface PeerGreeting {
  major: number;
  minor: number;
}

/**
 * Validates as much of the peer's greeting as has arrived (`len` bytes of `g`), so garbage is
 * rejected at once instead of after 64 bytes. Padding (bytes 1-8) is never checked: libzmq sends
 * `00..01` there. Returns the versions once all 64 bytes are in.
 */
export function checkGreeting(g: Uint8Array, len: number): PeerGreeting | undefined {
  if (len >= 1 && g[0] !== 0xff) throw new ZmtpProtocolError(`bad greeting signature byte 0x${hex2(g[0]!)}`);
  if (len >= 10 && (g[9]! & 1) !== 1) throw new ZmtpProtocolError("peer speaks unversioned ZMTP 1.0");
  if (len >= 11 && g[10]! < 3) throw new ZmtpProtocolError(`peer speaks ZMTP ${g[10]}.x; 3.0 or later required`);
  if (len < GREETING_BYTES) return undefined;
  for (let i = 0; i < 20; i++) {
    if (g[12 + i] !== MECHANISM_NULL[i]) {
      const mech = new TextDecoder().decode(g.subarray(12, 32)).replace(/\0+$/, "");
      throw new ZmtpProtocolError(`unsupported security mechanism ${JSON.stringify(mech)}; only NULL`);
    }
  }
  return { major: g[10]!, minor: g[11]! };
}

function hex2(n: number): string {
  return n.toString(16).padStart(2, "0");
}

/** Bytes of a frame header for a body of `size` bytes: LONG only above 255, as libzmq sends. */
function headerBytes(size: number): number {
  return size > 255 ? 9 : 2;
}

function writeHeader(out: Uint8Array, at: number, flags: number, size: number): number {
  if (size > 255) {
    out[at] = flags | FLAG_LONG;
    const dv = new DataView(out.buffer, out.byteOffset + at + 1, 8);
    dv.setUint32(0, Math.floor(size / 0x1_0000_0000));
    dv.setUint32(4, size >>> 0);
    return at + 9;
  }
  out[at] = flags;
  out[at + 1] = size;
  return at + 2;
}

/** One multipart message as wire bytes (MORE on all but the last frame). At least one frame. */
export function encodeMessage(frames: readonly Uint8Array[]): Uint8Array {
  let total = 0;
  for (const f of frames) total += headerBytes(f.length) + f.length;
  const out = new Uint8Array(total);
  let at = 0;
  const last = frames.length - 1;
  for (let i = 0; i <= last; i++) {
    const f = frames[i]!;
    at = writeHeader(out, at, i < last ? FLAG_MORE : 0, f.length);
    out.set(f, at);
    at += f.length;
  }
  return out;
}

const ascii = new TextEncoder();

/** A command frame: `u8 name_len, name, data` (the name is length-prefixed, not NUL-terminated). */
export function encodeCommand(name: string, data: Uint8Array = new Uint8Array(0)): Uint8Array {
  const n = ascii.encode(name);
  const size = 1 + n.length + data.length;
  const out = new Uint8Array(headerBytes(size) + size);
  let at = writeHeader(out, 0, FLAG_COMMAND, size);
  out[at++] = n.length;
  out.set(n, at);
  out.set(data, at + n.length);
  return out;
}

/** READY with exactly-cased `Socket-Type` and, for types that carry one, `Identity` (libzmq is case-sensitive). */
export function encodeReady(type: SocketType, identity?: Uint8Array): Uint8Array {
  const props: [string, Uint8Array][] = [["Socket-Type", ascii.encode(type)]];
  if (identity !== undefined) props.push(["Identity", identity]);
  let size = 0;
  const names = props.map(([k]) => ascii.encode(k));
  for (let i = 0; i < props.length; i++) size += 1 + names[i]!.length + 4 + props[i]![1].length;
  const data = new Uint8Array(size);
  const dv = new DataView(data.buffer);
  let at = 0;
  for (let i = 0; i < props.length; i++) {
    const name = names[i]!;
    const value = props[i]![1];
    data[at++] = name.length;
    data.set(name, at);
    at += name.length;
    dv.setUint32(at, value.length);
    at += 4;
    data.set(value, at);
    at += value.length;
  }
  return encodeCommand("READY", data);
}

/** READY properties with lower-cased names (RFC says names are case-insensitive). */
export function parseProperties(data: Uint8Array): Map<string, Uint8Array> {
  const props = new Map<string, Uint8Array>();
  const dv = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let at = 0;
  while (at < data.length) {
    const nameLen = data[at]!;
    if (nameLen === 0) throw new ZmtpProtocolError("READY property with empty name");
    if (at + 1 + nameLen + 4 > data.length) throw new ZmtpProtocolError("truncated READY property");
    const name = new TextDecoder().decode(data.subarray(at + 1, at + 1 + nameLen)).toLowerCase();
    at += 1 + nameLen;
    const valueLen = dv.getUint32(at);
    at += 4;
    if (valueLen > data.length - at) throw new ZmtpProtocolError(`truncated READY property ${name}`);
    props.set(name, data.subarray(at, at + valueLen));
    at += valueLen;
  }
  return props;
}

/** PING: u16be TTL in deciseconds, then up to 16 bytes of context. */
export function encodePing(ttlMs: number, ctx: Uint8Array = new Uint8Array(0)): Uint8Array {
  const data = new Uint8Array(2 + Math.min(16, ctx.length));
  const ttlDs = Math.min(0xffff, Math.max(0, Math.round(ttlMs / 100)));
  data[0] = ttlDs >> 8;
  data[1] = ttlDs & 0xff;
  data.set(ctx.subarray(0, 16), 2);
  return encodeCommand("PING", data);
}

export function encodePong(ctx: Uint8Array): Uint8Array {
  return encodeCommand("PONG", ctx.subarray(0, 16));
}

/**
 * A (un)subscription in the form the peer's version expects: a SUBSCRIBE/CANCEL command for 3.1+,
 * a `01`/`00`-prefixed message for 3.0 (docs/references.md#zmtp-1.2).
 */
export function encodeSubscription(topic: Uint8Array, subscribe: boolean, peerMinor: number): Uint8Array {
  if (peerMinor >= 1) return encodeCommand(subscribe ? "SUBSCRIBE" : "CANCEL", topic);
  const body = new Uint8Array(1 + topic.length);
  body[0] = subscribe ? 1 : 0;
  body.set(topic, 1);
  return encodeMessage([body]);
}

/** Frames given as strings are UTF-8 encoded; Uint8Arrays are used as they are. */
export function toBytes(x: Uint8Array | string): Uint8Array {
  return typeof x === "string" ? ascii.encode(x) : x;
}

export function hasPrefix(data: Uint8Array, prefix: Uint8Array): boolean {
  if (prefix.length > data.length) return false;
  for (let i = 0; i < prefix.length; i++) if (data[i] !== prefix[i]) return false;
  return true;
}
