// The event-ingest fast path: one walk over a KvEventBatch's bytes into reused typed arrays
// (KvOps), with no JS object per event and no array per hash or token list. It accepts only the
// shapes engines actually send (vLLM map and array events, SGLang arrays) in their common encodings
// and refuses (returns false) anything else — unknown types or keys, odd int encodings, digests,
// cache salts, extra keys other than null, truncation, trailing bytes. The caller then decodes the
// same bytes with decodeKvEventBatchPairs (kv-events.ts), which stays the reference: whenever this
// reader accepts a batch, the events it yields are exactly the ones the reference yields
// (test/protocol/kv-events-fast.test.ts checks generated batches and thousands of byte mutations).
// A batch is read whole before the caller applies anything, as with the reference.
// The reader stays one file: its cursor (b, p, end) is module state every step reads and writes,
// which kept the per-event walk free of property loads (a state object or class would add them);
// the output columns (kv-ops.ts) and the key tables (kv-events-keys.ts) live beside it.
import { DEFAULT_LIMITS, strAt } from "./msgpack-read.ts";
import { KvOps, OP_CLEARED, OP_REMOVED, OP_STORED } from "./kv-ops.ts";
import { K_BS, K_EXTRA, K_GROUP, K_HASHES, K_KIND, K_LOCALITY, K_LORA, K_LORA_ID, K_MEDIUM, K_OWNERSHIP, K_PARENT, K_SESSION, K_TOKENS, K_TYPE, K_VERSION, K_WINDOW, KEYS_BY_LEN, REMOVED_OK, STORED_OK, T_CLEARED, T_REMOVED, T_STORED, TAGS } from "./kv-events-keys.ts";

export { KvOps, OP_CLEARED, OP_REMOVED, OP_STORED } from "./kv-ops.ts";

/** Thrown inside the reader only: "not a shape this path takes" (never escapes readKvOps). */
const REFUSE = new Error("kv fast path refused");

// Reader state (module-level: one batch at a time, never re-entered).
let b: Uint8Array = new Uint8Array(0);
let p = 0;
let end = 0;
let ops = new KvOps();

function byte(): number {
  if (p >= end) throw REFUSE;
  return b[p++]!;
}

function u16(): number {
  if (p + 2 > end) throw REFUSE;
  const v = (b[p]! << 8) | b[p + 1]!;
  p += 2;
  return v;
}

function u32(): number {
  if (p + 4 > end) throw REFUSE;
  const v = ((b[p]! << 24) | (b[p + 1]! << 16) | (b[p + 2]! << 8) | b[p + 3]!) >>> 0;
  p += 4;
  return v;
}

/** An array header's count (fixarray, array16, array32), or REFUSE. */
function arrayLen(h: number): number {
  if (h >= 0x90 && h <= 0x9f) return h & 0x0f;
  if (h === 0xdc) return u16();
  if (h === 0xdd) return u32();
  throw REFUSE;
}

/** A small int (fixint, uint8/16/32, int8/16/32), as the reference reader returns it; else REFUSE. */
function intFrom(h: number): number {
  if (h <= 0x7f) return h;
  if (h >= 0xe0) return h - 0x100;
  switch (h) {
    case 0xcc:
      return byte();
    case 0xcd:
      return u16();
    case 0xce:
      return u32();
    case 0xd0: {
      const x = byte();
      return x >= 0x80 ? x - 0x100 : x;
    }
    case 0xd1: {
      const x = u16();
      return x >= 0x8000 ? x - 0x10000 : x;
    }
    case 0xd2:
      return u32() | 0;
    default:
      throw REFUSE;
  }
}

function intOrNull(): number | null {
  const h = byte();
  return h === 0xc0 ? null : intFrom(h);
}

function strFrom(h: number): string {
  let n: number;
  if (h >= 0xa0 && h <= 0xbf) n = h & 0x1f;
  else if (h === 0xd9) n = byte();
  else if (h === 0xda) n = u16();
  else if (h === 0xdb) n = u32();
  else throw REFUSE;
  if (n > end - p) throw REFUSE;
  const s = strAt(b, p, n);
  p += n;
  return s;
}

function strOrNull(): string | null {
  const h = byte();
  return h === 0xc0 ? null : strFrom(h);
}

/** One int of any width as u32 halves (two's complement of its low 64 bits) into hashes[2j..]. */
function hashInto(out: Uint32Array, j: number): void {
  const h = byte();
  let lo: number;
  let hi = 0;
  if (h <= 0x7f) lo = h;
  else if (h >= 0xe0) {
    lo = (h - 0x100) >>> 0;
    hi = 0xffffffff;
  } else if (h === 0xcf || h === 0xd3) {
    hi = u32();
    lo = u32();
  } else if (h === 0xce) lo = u32();
  else if (h === 0xcd) lo = u16();
  else if (h === 0xcc) lo = byte();
  else if (h === 0xd2) {
    const x = u32() | 0;
    lo = x >>> 0;
    if (x < 0) hi = 0xffffffff;
  } else if (h === 0xd1) {
    const x = u16();
    const v = x >= 0x8000 ? x - 0x10000 : x;
    lo = v >>> 0;
    if (v < 0) hi = 0xffffffff;
  } else if (h === 0xd0) {
    const x = byte();
    const v = x >= 0x80 ? x - 0x100 : x;
    lo = v >>> 0;
    if (v < 0) hi = 0xffffffff;
  } else throw REFUSE;
  out[2 * j] = lo;
  out[2 * j + 1] = hi;
}

/** A list of int hashes appended to ops.hashes; returns its count. */
function hashList(): number {
  const n = arrayLen(byte());
  if (n > end - p) throw REFUSE;
  const o = ops;
  if (2 * (o.nHashes + n) > o.hashes.length) {
    const g = new Uint32Array(Math.max(2 * (o.nHashes + n), 2 * o.hashes.length));
    g.set(o.hashes.subarray(0, 2 * o.nHashes));
    o.hashes = g;
  }
  const out = o.hashes;
  for (let i = 0; i < n; i++) hashInto(out, o.nHashes + i);
  o.nHashes += n;
  return n;
}

/** A token list (uint encodings below 2^32 only) appended to ops.tokens; returns its count. */
function tokenList(): number {
  const n = arrayLen(byte());
  if (n > end - p) throw REFUSE;
  const o = ops;
  if (o.nTokens + n > o.tokens.length) {
    const g = new Uint32Array(Math.max(o.nTokens + n, 2 * o.tokens.length));
    g.set(o.tokens.subarray(0, o.nTokens));
    o.tokens = g;
  }
  const out = o.tokens;
  const bb = b;
  const safeEnd = end - 5; // every element before it has its 5 bytes in range
  let q = p;
  let k = o.nTokens;
  for (let i = 0; i < n; i++) {
    if (q > safeEnd) {
      // Near the end: the checked path.
      p = q;
      const h = byte();
      if (h <= 0x7f) out[k++] = h;
      else if (h === 0xce) out[k++] = u32();
      else if (h === 0xcd) out[k++] = u16();
      else if (h === 0xcc) out[k++] = byte();
      else throw REFUSE;
      q = p;
      continue;
    }
    const h = bb[q]!;
    if (h === 0xce) {
      out[k++] = ((bb[q + 1]! << 24) | (bb[q + 2]! << 16) | (bb[q + 3]! << 8) | bb[q + 4]!) >>> 0;
      q += 5;
    } else if (h <= 0x7f) {
      out[k++] = h;
      q += 1;
    } else if (h === 0xcd) {
      out[k++] = (bb[q + 1]! << 8) | bb[q + 2]!;
      q += 3;
    } else if (h === 0xcc) {
      out[k++] = bb[q + 1]!;
      q += 2;
    } else throw REFUSE;
  }
  p = q;
  o.nTokens = k;
  return n;
}

/** The parent hash: nil (false) or an int of any width into parentLo/Hi[e] (true). */
function parentInto(e: number): boolean {
  if (p < end && b[p] === 0xc0) {
    p++;
    return false;
  }
  hashInto(scratchPair, 0);
  ops.parentLo[e] = scratchPair[0]!;
  ops.parentHi[e] = scratchPair[1]!;
  return true;
}
const scratchPair = new Uint32Array(2);

/** extra_keys: only nil or a list of nils (no block has extra keys) is taken. */
function extraKeys(): void {
  const h = byte();
  if (h === 0xc0) return;
  const n = arrayLen(h);
  for (let i = 0; i < n; i++) if (byte() !== 0xc0) throw REFUSE;
}

/** Skip one scalar (nil, bool, int, float, str); containers, bin and extensions are refused. */
function skipScalar(): void {
  const h = byte();
  if (h <= 0x7f || h >= 0xe0 || h === 0xc0 || h === 0xc2 || h === 0xc3) return;
  if ((h >= 0xa0 && h <= 0xbf) || h === 0xd9 || h === 0xda || h === 0xdb) {
    strFrom(h);
    return;
  }
  let n: number;
  switch (h) {
    case 0xcc:
    case 0xd0:
      n = 1;
      break;
    case 0xcd:
    case 0xd1:
      n = 2;
      break;
    case 0xce:
    case 0xd2:
    case 0xca:
      n = 4;
      break;
    case 0xcf:
    case 0xd3:
    case 0xcb:
      n = 8;
      break;
    default:
      throw REFUSE;
  }
  if (p + n > end) throw REFUSE;
  p += n;
}

function sameBytes(want: Uint8Array, at: number): boolean {
  for (let i = 0; i < want.length; i++) if (b[at + i] !== want[i]) return false;
  return true;
}

/** A map key (fixstr) as its K_ bit; REFUSE for any other key. */
function keyBit(): number {
  const h = byte();
  if (h < 0xa0 || h > 0xbf) throw REFUSE;
  const n = h & 0x1f;
  if (n > end - p) throw REFUSE;
  const cands = KEYS_BY_LEN[n]!;
  for (let i = 0; i < cands.length; i++) {
    const c = cands[i]!;
    if (sameBytes(c.bytes, p)) {
      p += n;
      return c.bit;
    }
  }
  throw REFUSE;
}

/** An event type tag (fixstr) as T_*; REFUSE for anything else. */
function typeTag(): number {
  const h = byte();
  if (h < 0xa0 || h > 0xbf) throw REFUSE;
  const n = h & 0x1f;
  if (n > end - p) throw REFUSE;
  for (let i = 0; i < TAGS.length; i++) {
    const t = TAGS[i]!;
    if (t.bytes.length === n && sameBytes(t.bytes, p)) {
      p += n;
      return t.tag;
    }
  }
  throw REFUSE;
}

function reset(e: number, kind: number): void {
  const o = ops;
  o.kind[e] = kind;
  o.hStart[e] = o.nHashes;
  o.hCount[e] = 0;
  o.tStart[e] = o.nTokens;
  o.tCount[e] = 0;
  o.blockSize[e] = 0;
  o.hasParent[e] = 0;
  o.medium[e] = null;
  o.lora[e] = null;
  o.group[e] = null;
  o.specKind[e] = null;
  o.locality[e] = null;
}

/** The reference's checks on a store's fields that this path can see (else it refuses). */
function checkStored(e: number, seen: number): void {
  const o = ops;
  if ((seen & (K_HASHES | K_TOKENS | K_BS)) !== (K_HASHES | K_TOKENS | K_BS)) throw REFUSE;
  const bs = o.blockSize[e]!;
  if (bs < 0 || (bs === 0 && o.tCount[e]! > 0)) throw REFUSE;
}

function mapEvent(n: number, e: number): void {
  const o = ops;
  reset(e, OP_STORED);
  let type = 0;
  let seen = 0;
  for (let i = 0; i < n; i++) {
    const bit = keyBit();
    switch (bit) {
      case K_TYPE:
        type = typeTag();
        break;
      case K_HASHES:
        o.hStart[e] = o.nHashes;
        o.hCount[e] = hashList();
        break;
      case K_PARENT:
        o.hasParent[e] = parentInto(e) ? 1 : 0;
        break;
      case K_TOKENS:
        o.tStart[e] = o.nTokens;
        o.tCount[e] = tokenList();
        break;
      case K_BS:
        o.blockSize[e] = intFrom(byte());
        break;
      case K_LORA_ID:
        intOrNull();
        break;
      case K_MEDIUM:
        o.medium[e] = strOrNull();
        break;
      case K_LORA:
        o.lora[e] = strOrNull();
        break;
      case K_EXTRA:
        extraKeys();
        break;
      case K_GROUP:
        o.group[e] = intOrNull();
        break;
      case K_KIND:
        o.specKind[e] = strOrNull();
        break;
      case K_WINDOW:
        intOrNull();
        break;
      case K_LOCALITY:
        o.locality[e] = strOrNull();
        break;
      case K_OWNERSHIP:
        skipScalar();
        break;
      case K_SESSION:
        skipScalar();
        break;
      case K_VERSION:
        skipScalar();
        break;
      default:
        throw REFUSE; // unknown key
    }
    if ((seen & bit) !== 0) throw REFUSE; // a repeated key: the reference keeps the last one
    seen |= bit;
  }
  if (type === T_STORED) {
    if ((seen & ~STORED_OK) !== 0) throw REFUSE;
    checkStored(e, seen);
  } else if (type === T_REMOVED) {
    if ((seen & ~REMOVED_OK) !== 0 || (seen & K_HASHES) === 0) throw REFUSE;
    o.kind[e] = OP_REMOVED;
  } else if (type === T_CLEARED) {
    if (seen !== K_TYPE) throw REFUSE;
    o.kind[e] = OP_CLEARED;
  } else {
    throw REFUSE;
  }
}

// Positional layouts as kv-events.ts reads them:
//   BlockStored  [tag, hashes, parent, token_ids, block_size, lora_id, medium?, lora_name?,
//                 extra_keys?, group_idx?, kv_cache_spec_kind?, kv_cache_spec_sliding_window?]
//   BlockRemoved [tag, hashes, medium?, group_idx?]      AllBlocksCleared [tag]
function arrayEvent(n: number, e: number): void {
  const o = ops;
  if (n === 0) throw REFUSE;
  const tag = typeTag();
  if (tag === T_STORED) {
    if (n < 6 || n > 12) throw REFUSE;
    reset(e, OP_STORED);
    o.hCount[e] = hashList();
    o.hasParent[e] = parentInto(e) ? 1 : 0;
    o.tCount[e] = tokenList();
    o.blockSize[e] = intFrom(byte());
    intOrNull(); // lora_id
    if (n > 6) o.medium[e] = strOrNull();
    if (n > 7) o.lora[e] = strOrNull(); // a {cache_salt} map here is refused
    if (n > 8) extraKeys();
    if (n > 9) o.group[e] = intOrNull();
    if (n > 10) o.specKind[e] = strOrNull();
    if (n > 11) intOrNull(); // sliding window
    checkStored(e, K_HASHES | K_TOKENS | K_BS);
  } else if (tag === T_REMOVED) {
    if (n < 2 || n > 4) throw REFUSE;
    reset(e, OP_REMOVED);
    o.hCount[e] = hashList();
    if (n > 2) o.medium[e] = strOrNull();
    if (n > 3) o.group[e] = intOrNull();
  } else if (tag === T_CLEARED) {
    if (n !== 1) throw REFUSE;
    reset(e, OP_CLEARED);
  } else {
    throw REFUSE;
  }
}

function batch(): void {
  const n = arrayLen(byte());
  if (n < 2 || n > 3) throw REFUSE;
  const h = byte();
  let ts: number;
  if (h === 0xcb) {
    if (p + 8 > end) throw REFUSE;
    ts = new DataView(b.buffer, b.byteOffset + p, 8).getFloat64(0);
    p += 8;
  } else if (h === 0xca) {
    if (p + 4 > end) throw REFUSE;
    ts = new DataView(b.buffer, b.byteOffset + p, 4).getFloat32(0);
    p += 4;
  } else {
    ts = intFrom(h);
  }
  if (!Number.isFinite(ts)) throw REFUSE;
  ops.ts = ts;
  const m = arrayLen(byte());
  if (m > end - p) throw REFUSE;
  ops.grow(m);
  for (let e = 0; e < m; e++) {
    const eh = byte();
    if (eh >= 0x80 && eh <= 0x8f) mapEvent(eh & 0x0f, e);
    else if (eh === 0xde) mapEvent(u16(), e);
    else arrayEvent(arrayLen(eh), e);
  }
  ops.n = m;
  if (n === 3) intOrNull(); // dp rank
  if (p !== end) throw REFUSE;
}

/**
 * Read a batch into `out` (its buffers are reused and may be replaced); false when the batch is
 * not one this path takes, and `out` is then garbage: decode it with decodeKvEventBatchPairs.
 */
export function readKvOps(payload: Uint8Array, out: KvOps): boolean {
  if (payload.length > DEFAULT_LIMITS.maxBytes) return false;
  b = payload;
  p = 0;
  end = payload.length;
  ops = out;
  out.n = 0;
  out.nHashes = 0;
  out.nTokens = 0;
  try {
    batch();
    return true;
  } catch (e) {
    if (e !== REFUSE) throw e;
    return false;
  } finally {
    b = EMPTY;
  }
}
const EMPTY = new Uint8Array(0);
