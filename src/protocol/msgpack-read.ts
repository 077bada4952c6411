// A strict msgpack reader for untrusted engine payloads. @msgpack/msgpack (still used to encode,
// and as the oracle in tests) validates nothing of what follows, and a separate validating pass
// over every batch cost ~1.5× the decode; this reader checks as it goes at the library's speed.
// It refuses, with MsgpackRejected:
//   - extension types (ext8/16/32, fixext): code-capable decoding is this ecosystem's most common
//     vulnerability (SGLang's msgpack-wrapped pickle, docs/references.md#reliability-2); herd's formats use none;
//   - any declared length the remaining bytes cannot back (a str32/array32 header claiming 4 GiB
//     in a 20-byte payload), so a declared length never drives an allocation;
//   - nesting deeper than maxDepth (recursion is bounded by it), the reserved byte 0xc1, map keys
//     that are not strings or numbers, "__proto__" keys, truncation and trailing bytes.
// Values: nil → null, ints → number except uint64/int64 encodings → bigint (like
// @msgpack/msgpack with useBigInt64), floats → number, str → string, bin → Uint8Array view, array
// → Array, map → plain object. With ReadOptions.packUint32MinLength, an array of at least that many
// elements that are all unsigned ints below 2^32 in uint encodings (fixint, uint8/16/32) comes back
// as a Uint32Array instead (token-id lists: no JS value per token, hashed straight from the words).

export class MsgpackRejected extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(`${message} at byte ${offset}`);
    this.name = "MsgpackRejected";
  }
}

export interface MsgpackLimits {
  /** Open containers at once (the outermost counts as 1). */
  maxDepth: number;
  maxBytes: number;
}

export interface ReadOptions {
  /**
   * Arrays of at least this many elements, all unsigned ints < 2^32 in uint encodings, are returned
   * as a Uint32Array (0 or absent: never). Any other element makes the array decode as usual.
   */
  packUint32MinLength?: number;
  /**
   * Arrays of 1+ elements that are all ints (any int encoding, uint64/int64 included) not packed as
   * a Uint32Array come back as U64Pairs: each value's low 64 bits (two's complement) as u32 halves,
   * with no BigInt made (engine block-hash lists on the event-ingest path).
   */
  u64Pairs?: boolean;
}

/** An all-int msgpack array as u32 halves: `words[2i]` low, `words[2i + 1]` high, of `length` values. */
export class U64Pairs {
  constructor(
    readonly words: Uint32Array,
    readonly length: number,
  ) {}

  /** The values as the reader would return them without the option (number, bigint past 32 bits). */
  static plain(p: U64Pairs): (number | bigint)[] {
    const out = new Array<number | bigint>(p.length);
    for (let i = 0; i < p.length; i++) {
      const lo = p.words[2 * i]!;
      const hi = p.words[2 * i + 1]!;
      if (hi === 0) out[i] = lo;
      else if (hi === 0xffffffff && lo >= 0x80000000) out[i] = lo | 0;
      else out[i] = BigInt.asIntN(64, (BigInt(hi) << 32n) | BigInt(lo));
    }
    return out;
  }
}

export const DEFAULT_LIMITS: MsgpackLimits = { maxDepth: 32, maxBytes: 64 * 1024 * 1024 };

const utf8 = new TextDecoder();

// Short strings (type tags, map keys, media) repeat in every event: a small direct-mapped cache
// keyed by their bytes returns the same string without decoding it again.
const SHORT = 24;
const CACHE_SIZE = 1024;
const cacheBytes: (Uint8Array | null)[] = new Array(CACHE_SIZE).fill(null);
const cacheStrings: string[] = new Array(CACHE_SIZE).fill("");

/** A str's bytes as a string: cached for short strings (≤ 24 bytes), decoded otherwise. */
export function strAt(b: Uint8Array, start: number, n: number): string {
  return n <= SHORT ? shortString(b, start, n) : utf8.decode(b.subarray(start, start + n));
}

function shortString(b: Uint8Array, start: number, n: number): string {
  let h = n;
  for (let i = start; i < start + n; i++) h = Math.imul(h ^ b[i]!, 0x01000193);
  const slot = (h >>> 0) & (CACHE_SIZE - 1);
  const hit = cacheBytes[slot];
  if (hit !== null && hit !== undefined && hit.length === n) {
    let same = true;
    for (let i = 0; i < n; i++) {
      if (hit[i] !== b[start + i]) {
        same = false;
        break;
      }
    }
    if (same) return cacheStrings[slot]!;
  }
  const s = utf8.decode(b.subarray(start, start + n));
  cacheBytes[slot] = b.slice(start, start + n);
  cacheStrings[slot] = s;
  return s;
}

class Reader {
  pos = 0;
  private readonly view: DataView;
  constructor(
    private readonly b: Uint8Array,
    private readonly maxDepth: number,
    private readonly packMin: number,
    private readonly pairs: boolean,
  ) {
    this.view = new DataView(b.buffer, b.byteOffset, b.byteLength);
  }

  private need(n: number): void {
    if (n > this.b.length - this.pos) throw new MsgpackRejected(`truncated: ${n} bytes declared, ${this.b.length - this.pos} left`, this.pos);
  }

  private str(n: number): string {
    this.need(n);
    const b = this.b;
    const start = this.pos;
    this.pos += n;
    if (n <= SHORT) return shortString(b, start, n);
    return utf8.decode(b.subarray(start, start + n));
  }

  private bin(n: number): Uint8Array {
    this.need(n);
    const v = this.b.subarray(this.pos, this.pos + n);
    this.pos += n;
    return v;
  }

  private array(n: number, depth: number): unknown[] | Uint32Array | U64Pairs {
    // Every element takes at least one byte: the count is bounded by what is left.
    this.need(n);
    if (depth >= this.maxDepth) throw new MsgpackRejected(`nesting deeper than ${this.maxDepth}`, this.pos);
    if (this.packMin > 0 && n >= this.packMin) {
      const packed = this.packedU32(n);
      if (packed !== null) return packed;
    }
    if (this.pairs && n > 0) {
      const packed = this.packedU64(n);
      if (packed !== null) return packed;
    }
    const out = new Array<unknown>(n);
    for (let i = 0; i < n; i++) out[i] = this.value(depth + 1);
    return out;
  }

  /**
   * The next n values as a Uint32Array if all are uint encodings below 2^32, else null with the
   * position unchanged (the caller then decodes generically, and reports truncation exactly as it
   * would have). n is already bounded by the bytes left, so the allocation is too.
   */
  private packedU32(n: number): Uint32Array | null {
    const b = this.b;
    const end = b.length;
    let p = this.pos;
    const h0 = b[p]!;
    if (!(h0 <= 0x7f || h0 === 0xcc || h0 === 0xcd || h0 === 0xce)) return null; // before allocating
    const out = new Uint32Array(n);
    for (let i = 0; i < n; i++) {
      if (p >= end) return null;
      const h = b[p]!;
      if (h <= 0x7f) {
        out[i] = h;
        p += 1;
      } else if (h === 0xcd) {
        if (p + 3 > end) return null;
        out[i] = (b[p + 1]! << 8) | b[p + 2]!;
        p += 3;
      } else if (h === 0xce) {
        if (p + 5 > end) return null;
        out[i] = ((b[p + 1]! << 24) | (b[p + 2]! << 16) | (b[p + 3]! << 8) | b[p + 4]!) >>> 0;
        p += 5;
      } else if (h === 0xcc) {
        if (p + 2 > end) return null;
        out[i] = b[p + 1]!;
        p += 2;
      } else {
        return null;
      }
    }
    this.pos = p;
    return out;
  }

  /** The next n values as U64Pairs if all are int encodings, else null with the position unchanged. */
  private packedU64(n: number): U64Pairs | null {
    const b = this.b;
    const end = b.length;
    let p = this.pos;
    const h0 = b[p]!;
    if (!(h0 <= 0x7f || h0 >= 0xe0 || (h0 >= 0xcc && h0 <= 0xcf) || (h0 >= 0xd0 && h0 <= 0xd3))) return null;
    const out = new Uint32Array(2 * n);
    for (let i = 0; i < n; i++) {
      if (p >= end) return null;
      const h = b[p]!;
      let lo: number;
      let hi = 0;
      if (h <= 0x7f) {
        lo = h;
        p += 1;
      } else if (h >= 0xe0) {
        lo = (h - 0x100) >>> 0;
        hi = 0xffffffff;
        p += 1;
      } else if (h === 0xcf || h === 0xd3) {
        if (p + 9 > end) return null;
        hi = ((b[p + 1]! << 24) | (b[p + 2]! << 16) | (b[p + 3]! << 8) | b[p + 4]!) >>> 0;
        lo = ((b[p + 5]! << 24) | (b[p + 6]! << 16) | (b[p + 7]! << 8) | b[p + 8]!) >>> 0;
        p += 9;
      } else if (h === 0xce || h === 0xd2) {
        if (p + 5 > end) return null;
        const x = (b[p + 1]! << 24) | (b[p + 2]! << 16) | (b[p + 3]! << 8) | b[p + 4]!;
        lo = x >>> 0;
        if (h === 0xd2 && x < 0) hi = 0xffffffff;
        p += 5;
      } else if (h === 0xcd || h === 0xd1) {
        if (p + 3 > end) return null;
        const x = (b[p + 1]! << 8) | b[p + 2]!;
        const v = h === 0xd1 && x >= 0x8000 ? x - 0x10000 : x;
        lo = v >>> 0;
        if (v < 0) hi = 0xffffffff;
        p += 3;
      } else if (h === 0xcc || h === 0xd0) {
        if (p + 2 > end) return null;
        const x = b[p + 1]!;
        const v = h === 0xd0 && x >= 0x80 ? x - 0x100 : x;
        lo = v >>> 0;
        if (v < 0) hi = 0xffffffff;
        p += 2;
      } else {
        return null;
      }
      out[2 * i] = lo;
      out[2 * i + 1] = hi;
    }
    this.pos = p;
    return new U64Pairs(out, n);
  }

  private map(n: number, depth: number): Record<string, unknown> {
    this.need(2 * n);
    if (depth >= this.maxDepth) throw new MsgpackRejected(`nesting deeper than ${this.maxDepth}`, this.pos);
    const out: Record<string, unknown> = {};
    for (let i = 0; i < n; i++) {
      const at = this.pos;
      const k = this.value(depth + 1);
      if (typeof k !== "string" && typeof k !== "number") throw new MsgpackRejected("map key is not a string or number", at);
      if (k === "__proto__") throw new MsgpackRejected("map key __proto__", at);
      out[k] = this.value(depth + 1);
    }
    return out;
  }

  value(depth: number): unknown {
    this.need(1);
    const b = this.b;
    const h = b[this.pos++]!;
    if (h <= 0x7f) return h;
    if (h >= 0xe0) return h - 0x100;
    if (h <= 0x8f) return this.map(h & 0x0f, depth);
    if (h <= 0x9f) return this.array(h & 0x0f, depth);
    if (h <= 0xbf) return this.str(h & 0x1f);
    const v = this.view;
    let p = this.pos;
    switch (h) {
      case 0xc0:
        return null;
      case 0xc2:
        return false;
      case 0xc3:
        return true;
      case 0xc4:
      case 0xd9: {
        this.need(1);
        const n = b[this.pos++]!;
        return h === 0xc4 ? this.bin(n) : this.str(n);
      }
      case 0xc5:
      case 0xda: {
        this.need(2);
        const n = v.getUint16(p);
        this.pos += 2;
        return h === 0xc5 ? this.bin(n) : this.str(n);
      }
      case 0xc6:
      case 0xdb: {
        this.need(4);
        const n = v.getUint32(p);
        this.pos += 4;
        return h === 0xc6 ? this.bin(n) : this.str(n);
      }
      case 0xca:
        this.need(4);
        this.pos += 4;
        return v.getFloat32(p);
      case 0xcb:
        this.need(8);
        this.pos += 8;
        return v.getFloat64(p);
      case 0xcc:
        this.need(1);
        return b[this.pos++]!;
      case 0xcd:
        this.need(2);
        this.pos += 2;
        return v.getUint16(p);
      case 0xce:
        this.need(4);
        this.pos += 4;
        return v.getUint32(p);
      case 0xcf:
        this.need(8);
        this.pos += 8;
        return v.getBigUint64(p);
      case 0xd0:
        this.need(1);
        this.pos += 1;
        return v.getInt8(p);
      case 0xd1:
        this.need(2);
        this.pos += 2;
        return v.getInt16(p);
      case 0xd2:
        this.need(4);
        this.pos += 4;
        return v.getInt32(p);
      case 0xd3:
        this.need(8);
        this.pos += 8;
        return v.getBigInt64(p);
      case 0xdc:
      case 0xde: {
        this.need(2);
        const n = v.getUint16(p);
        this.pos += 2;
        return h === 0xdc ? this.array(n, depth) : this.map(n, depth);
      }
      case 0xdd:
      case 0xdf: {
        this.need(4);
        const n = v.getUint32(p);
        this.pos += 4;
        return h === 0xdd ? this.array(n, depth) : this.map(n, depth);
      }
      case 0xc1:
        throw new MsgpackRejected("reserved byte 0xc1", this.pos - 1);
      default:
        // 0xc7–0xc9 ext8/16/32 and 0xd4–0xd8 fixext.
        p = this.pos - 1;
        throw new MsgpackRejected(`msgpack extension type (0x${h.toString(16)}) rejected`, p);
    }
  }
}

/** Decode exactly one msgpack value filling `bytes`. Throws MsgpackRejected. */
export function readMsgpack(bytes: Uint8Array, limits: MsgpackLimits = DEFAULT_LIMITS, opts: ReadOptions = {}): unknown {
  if (bytes.length > limits.maxBytes) throw new MsgpackRejected(`payload of ${bytes.length} bytes exceeds ${limits.maxBytes}`, 0);
  const r = new Reader(bytes, limits.maxDepth, opts.packUint32MinLength ?? 0, opts.u64Pairs === true);
  const v = r.value(0);
  if (r.pos !== bytes.length) throw new MsgpackRejected(`${bytes.length - r.pos} trailing bytes`, r.pos);
  return v;
}
