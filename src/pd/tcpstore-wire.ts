// The subset of PyTorch's c10d TCPStore wire protocol that NIXL's metadata client speaks
// (ai-dynamo/nixl src/core/nixl_tcpstore_client.cpp @ 7389391; query types are c10d's
// `detail::QueryType` ordinals). Every integer is in host byte order — little-endian on every
// platform herd ships for (x86-64, arm64) — and a string is a u64 length followed by its bytes.
//
//   VALIDATE   0  u32 0x3C85F7CE                     no reply; must be the first request
//   SET        1  key, value                         no reply
//   GET        3  key                                u64 len + value
//   CHECK      5  u64 count, count × key             1 byte: READY 0 | NOT_READY 1
//   DELETE_KEY 8  key                                i64 number of keys deleted (0 or 1)
//   MULTI_GET 10  u64 count, count × key             count × (u64 len + value)
//   PING      13  u32 nonce                          the same u32
//
// This file is pure: bytes in, complete requests out (or a typed error that names the problem).
// Anything else — an unknown opcode, a length beyond the limits — is a protocol error and the
// server closes the connection, as c10d's server does for a peer it cannot parse.

export const VALIDATION_MAGIC = 0x3c85f7ce;

export const OP = { VALIDATE: 0, SET: 1, GET: 3, CHECK: 5, DELETE_KEY: 8, MULTI_GET: 10, PING: 13 } as const;

export type Request =
  | { op: "validate"; magic: number }
  | { op: "ping"; nonce: number }
  | { op: "set"; key: string; value: Uint8Array }
  | { op: "get"; key: string }
  | { op: "check"; keys: string[] }
  | { op: "delete"; key: string }
  | { op: "multi_get"; keys: string[] };

export interface WireLimits {
  /** Longest key accepted, bytes. */
  keyBytesMax: number;
  /** Largest value accepted, bytes (NIXL's own client refuses replies above 1 GiB). */
  valueBytesMax: number;
  /** Most keys in one CHECK or MULTI_GET. */
  keysPerRequestMax: number;
}

export const DEFAULT_WIRE_LIMITS: WireLimits = { keyBytesMax: 4096, valueBytesMax: 64 << 20, keysPerRequestMax: 1024 };

export class TcpStoreProtocolError extends Error {}

/** Not enough bytes yet for a whole request. */
const INCOMPLETE = Symbol("incomplete");

class Reader {
  off = 0;
  constructor(
    private readonly b: Uint8Array,
    private readonly v: DataView,
  ) {}
  need(n: number): void {
    if (this.b.length - this.off < n) throw INCOMPLETE;
  }
  u8(): number {
    this.need(1);
    return this.b[this.off++]!;
  }
  u32(): number {
    this.need(4);
    const x = this.v.getUint32(this.off, true);
    this.off += 4;
    return x;
  }
  u64(what: string, max: number): number {
    this.need(8);
    const x = this.v.getBigUint64(this.off, true);
    this.off += 8;
    if (x > BigInt(max)) throw new TcpStoreProtocolError(`${what} ${x} exceeds the limit ${max}`);
    return Number(x);
  }
  bytes(n: number): Uint8Array {
    this.need(n);
    const out = this.b.subarray(this.off, this.off + n);
    this.off += n;
    return out;
  }
  skip(n: number): void {
    this.need(n);
    this.off += n;
  }
  str(limits: WireLimits): string {
    return DECODER.decode(this.bytes(this.u64("key length", limits.keyBytesMax)));
  }
}

const DECODER = new TextDecoder();

function keysOf(r: Reader, limits: WireLimits): string[] {
  const n = r.u64("key count", limits.keysPerRequestMax);
  // Walk the lengths before decoding anything: an incomplete request is parsed again on every read,
  // and decoding its keys each time made one 4 MiB MULTI_GET sent in MSS-sized reads cost ≈ 4 s of
  // parsing (quadratic; found by test/fuzz/tcpstore.test.ts, issue 22).
  const start = r.off;
  for (let i = 0; i < n; i++) r.skip(r.u64("key length", limits.keyBytesMax));
  r.off = start;
  const keys: string[] = [];
  for (let i = 0; i < n; i++) keys.push(r.str(limits));
  return keys;
}

/**
 * Parse every complete request at the front of `buf`. Returns them and how many bytes they used;
 * the rest (a partial request) stays for the next read. Throws TcpStoreProtocolError on bad input.
 */
export function parseRequests(buf: Uint8Array, limits: WireLimits = DEFAULT_WIRE_LIMITS): { requests: Request[]; used: number } {
  const view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  const requests: Request[] = [];
  let used = 0;
  for (;;) {
    const r = new Reader(buf.subarray(used), new DataView(view.buffer, view.byteOffset + used, view.byteLength - used));
    if (r.off >= buf.length - used) break;
    try {
      requests.push(parseOne(r, limits));
    } catch (e) {
      if (e === INCOMPLETE) break;
      throw e;
    }
    used += r.off;
  }
  return { requests, used };
}

function parseOne(r: Reader, limits: WireLimits): Request {
  const op = r.u8();
  switch (op) {
    case OP.VALIDATE:
      return { op: "validate", magic: r.u32() };
    case OP.PING:
      return { op: "ping", nonce: r.u32() };
    case OP.SET: {
      const key = r.str(limits);
      const value = r.bytes(r.u64("value length", limits.valueBytesMax));
      return { op: "set", key, value: value.slice() };
    }
    case OP.GET:
      return { op: "get", key: r.str(limits) };
    case OP.CHECK:
      return { op: "check", keys: keysOf(r, limits) };
    case OP.DELETE_KEY:
      return { op: "delete", key: r.str(limits) };
    case OP.MULTI_GET:
      return { op: "multi_get", keys: keysOf(r, limits) };
    default:
      throw new TcpStoreProtocolError(`unsupported TCPStore query type ${op}`);
  }
}

/** u64 length + bytes, little-endian. */
export function encodeBlob(value: Uint8Array): Uint8Array {
  const out = new Uint8Array(8 + value.length);
  new DataView(out.buffer).setBigUint64(0, BigInt(value.length), true);
  out.set(value, 8);
  return out;
}

export function encodeU32(x: number): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, x >>> 0, true);
  return out;
}

export function encodeI64(x: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigInt64(0, BigInt(x), true);
  return out;
}
