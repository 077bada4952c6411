// vLLM / SGLang KV cache event batches (docs/references.md#engines-1, #engines-6.2): the msgpack payload of frame 2 of
// `[topic, u64be(seq), payload]`. Both encodings found in the wild are decoded:
//   - positional: events are arrays whose element 0 is the type tag (vLLM ≤ 0.23, SGLang < #37482);
//   - maps: events are maps with a "type" key (vLLM ≥ 0.24, SGLang ≥ #37482).
// The envelope is `[ts, events, dp_rank?]` (a map is tolerated). Unknown event types and unknown
// fields are skipped and counted, never fatal; a known event with a malformed field is skipped and
// counted as invalid. Only a malformed envelope fails the whole batch (KvDecodeError).
import { DEFAULT_LIMITS, readMsgpack, U64Pairs, type MsgpackLimits, type ReadOptions } from "./msgpack-read.ts";

export interface BlockStored {
  type: "BlockStored";
  /** Engine block hashes as u64 (signed ints two's-complement; bytes → their low 64 bits). */
  blockHashes: bigint[];
  /**
   * Set only by decodeKvEventBatchPairs: the hashes as u32 halves (`[2i]` low, `[2i + 1]` high)
   * and blockHashes is then empty; no BigInt is made per block on the ingest path.
   */
  hashPairs?: Uint32Array;
  parentBlockHash: bigint | null;
  /**
   * All tokens of all blocks, concatenated. Decoded lists of 8+ ids arrive as a Uint32Array (no JS
   * value per token); convert with Array.from before re-encoding (msgpack writes typed arrays as bin).
   */
  tokenIds: number[] | Uint32Array;
  blockSize: number;
  loraId: number | null;
  /** As sent ("GPU", "CPU", "CPU_PINNED", "DISK", …); null when absent. */
  medium: string | null;
  loraName: string | null;
  /**
   * SGLang BlockStoredWithMetadata / map `cache_salt`; for vLLM (≥ 0.17) read from the first block's
   * `extra_keys` (cache_salt is an extra key of a request's block 0 only, kv_cache_utils.py).
   */
  cacheSalt: string | null;
  /**
   * vLLM's `extra_keys` (#33304, 0.17): one entry per block, null or a list of the block's extra
   * hash keys (LoRA name, multimodal (identifier, offset), cache_salt, prompt-embeds digest).
   * Present only when the event carried a list.
   */
  extraKeys?: (unknown[] | null)[];
  groupIdx: number | null;
  kvCacheSpecKind: string | null;
  slidingWindow: number | null;
  /** "LOCAL" / "REMOTE" relative to the publisher (newer vLLM); null when absent. */
  locality: string | null;
}

export interface BlockRemoved {
  type: "BlockRemoved";
  blockHashes: bigint[];
  /** As in BlockStored: set only by decodeKvEventBatchPairs (blockHashes then empty). */
  hashPairs?: Uint32Array;
  medium: string | null;
  groupIdx: number | null;
  locality: string | null;
}

export interface AllBlocksCleared {
  type: "AllBlocksCleared";
}

export type KvEvent = BlockStored | BlockRemoved | AllBlocksCleared;

export interface KvEventBatch {
  /** Publisher wall clock, seconds (float). */
  ts: number;
  events: KvEvent[];
  /** vLLM data_parallel_rank / SGLang attn_dp_rank; null when absent. */
  dpRank: number | null;
  /** Events of an unknown type, skipped. */
  unknownEvents: number;
  /** Unknown map keys and unknown trailing array elements, ignored. */
  unknownFields: number;
  /** Events of a known type with a malformed field, skipped. */
  invalidEvents: number;
}

export class KvDecodeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "KvDecodeError";
  }
}

/** Decode one payload. Throws KvDecodeError when the bytes or the envelope are unusable. */
export function decodeKvEventBatch(payload: Uint8Array, limits: MsgpackLimits = DEFAULT_LIMITS): KvEventBatch {
  let raw: unknown;
  try {
    // Strict reader: extension types, over-long declared lengths and deep nesting are refused.
    raw = readMsgpack(payload, limits, PACK_U32);
  } catch (e) {
    throw new KvDecodeError(`bad msgpack: ${e instanceof Error ? e.message : String(e)}`);
  }
  return batchFrom(raw);
}

/**
 * decodeKvEventBatch for event ingest: lists of int block hashes come back as `hashPairs` (u32
 * halves, straight from the bytes) with `blockHashes` empty. Same validation and counters; a hash
 * list of digests (bytes) is converted to pairs after the usual bigint decode.
 */
export function decodeKvEventBatchPairs(payload: Uint8Array, limits: MsgpackLimits = DEFAULT_LIMITS): KvEventBatch {
  let raw: unknown;
  try {
    raw = readMsgpack(payload, limits, PACK_PAIRS);
  } catch (e) {
    throw new KvDecodeError(`bad msgpack: ${e instanceof Error ? e.message : String(e)}`);
  }
  wantPairs = true;
  try {
    return batchFrom(raw);
  } finally {
    wantPairs = false;
  }
}

const PACK_PAIRS: ReadOptions = { packUint32MinLength: 8, u64Pairs: true };
/** Whether the batch being decoded returns hash pairs (decodeKvEventBatchPairs; never re-entered). */
let wantPairs = false;
const NO_HASHES: bigint[] = [];

// Lists of 8+ u32 ints (token ids, small engine hashes) come back packed; everything below accepts
// a Uint32Array wherever it accepts an array, so decoding does not depend on the packing.
const PACK_U32: ReadOptions = { packUint32MinLength: 8 };

const BATCH_KEYS = new Set(["ts", "events", "data_parallel_rank", "attn_dp_rank", "dp_rank"]);

function batchFrom(raw: unknown): KvEventBatch {
  if (raw instanceof Uint32Array) raw = Array.from(raw);
  if (raw instanceof U64Pairs) raw = U64Pairs.plain(raw);
  let ts: unknown, events: unknown, rank: unknown;
  let unknownFields = 0;
  if (Array.isArray(raw)) {
    if (raw.length < 2) throw new KvDecodeError(`event batch has ${raw.length} elements, expected [ts, events, rank?]`);
    [ts, events, rank] = raw;
    if (raw.length > 3) unknownFields += raw.length - 3;
  } else if (isMap(raw)) {
    ts = own(raw, "ts");
    events = own(raw, "events");
    rank = own(raw, "data_parallel_rank") ?? own(raw, "attn_dp_rank") ?? own(raw, "dp_rank");
    for (const k of Object.keys(raw)) if (!BATCH_KEYS.has(k)) unknownFields++;
  } else {
    throw new KvDecodeError("event batch is neither an array nor a map");
  }
  const tsNum = typeof ts === "bigint" ? Number(ts) : ts;
  if (typeof tsNum !== "number" || !Number.isFinite(tsNum)) throw new KvDecodeError("event batch ts is not a number");
  if (events instanceof Uint32Array) events = Array.from(events);
  if (events instanceof U64Pairs) events = U64Pairs.plain(events);
  if (!Array.isArray(events)) throw new KvDecodeError("event batch events is not an array");
  const dpRank = rank === undefined || rank === null ? null : intOrNull(rank);
  const out: KvEventBatch = { ts: tsNum, events: [], dpRank, unknownEvents: 0, unknownFields, invalidEvents: 0 };
  for (const ev of events) decodeEvent(ev, out);
  return out;
}

function decodeEvent(ev: unknown, out: KvEventBatch): void {
  if (ev instanceof U64Pairs) ev = U64Pairs.plain(ev);
  try {
    const decoded = Array.isArray(ev) ? fromArray(ev, out) : isMap(ev) ? fromMap(ev, out) : undefined;
    if (decoded === undefined) out.unknownEvents++;
    else out.events.push(decoded);
  } catch (e) {
    if (!(e instanceof Invalid)) throw e;
    out.invalidEvents++;
  }
}

class Invalid extends Error {}

// Positional layouts (index 0 is the tag), docs/references.md#engines-1.5, #engines-1.6 and #engines-6.2:
//   BlockStored  [tag, hashes, parent, token_ids, block_size, lora_id, medium?, lora_name | {cache_salt}?,
//                 extra_keys?, group_idx?, kv_cache_spec_kind?, kv_cache_spec_sliding_window?]
//   BlockRemoved [tag, hashes, medium?, group_idx?]
//   AllBlocksCleared [tag]
const STORED_ARRAY_LEN = 12;
const REMOVED_ARRAY_LEN = 4;

function fromArray(a: unknown[], out: KvEventBatch): KvEvent | undefined {
  switch (a[0]) {
    case "BlockStored": {
      if (a.length < 6) throw new Invalid();
      let loraName: string | null = null;
      let cacheSalt: string | null = null;
      const slot7 = a[7];
      if (isMap(slot7)) cacheSalt = strOrNull(own(slot7, "cache_salt"));
      else loraName = strOrNull(slot7);
      if (a.length > STORED_ARRAY_LEN) out.unknownFields += a.length - STORED_ARRAY_LEN;
      return stored({
        extraKeys: a[8],
        blockHashes: a[1],
        parent: a[2],
        tokenIds: a[3],
        blockSize: a[4],
        loraId: a[5],
        medium: a[6],
        loraName,
        cacheSalt,
        groupIdx: a[9],
        kind: a[10],
        window: a[11],
        locality: undefined,
      });
    }
    case "BlockRemoved":
      if (a.length < 2) throw new Invalid();
      if (a.length > REMOVED_ARRAY_LEN) out.unknownFields += a.length - REMOVED_ARRAY_LEN;
      return withHashes({ type: "BlockRemoved", blockHashes: NO_HASHES, medium: strOrNull(a[2]), groupIdx: intOrNull(a[3]), locality: null }, a[1]);
    case "AllBlocksCleared":
      if (a.length > 1) out.unknownFields += a.length - 1;
      return { type: "AllBlocksCleared" };
    default:
      return undefined;
  }
}

// Map keys herd knows; anything else counts as unknown. Known-but-unused keys (
// event_version, ownership, session_id, metadata) are not "unknown".
const STORED_KEYS = new Set([
  "type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name",
  "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window", "locality", "ownership",
  "session_id", "event_version", "cache_salt", "metadata",
]);
const CLEARED_KEYS = new Set(["type"]);
const REMOVED_KEYS = new Set(["type", "block_hashes", "medium", "group_idx", "locality", "ownership", "session_id"]);

function fromMap(m: Record<string, unknown>, out: KvEventBatch): KvEvent | undefined {
  const count = (known: Set<string>) => {
    for (const k in m) if (!known.has(k)) out.unknownFields++;
  };
  switch (own(m, "type")) {
    case "BlockStored": {
      count(STORED_KEYS);
      const meta = own(m, "metadata");
      const salt = own(m, "cache_salt") ?? (isMap(meta) ? own(meta, "cache_salt") : undefined);
      return stored({
        extraKeys: own(m, "extra_keys"),
        blockHashes: own(m, "block_hashes"),
        parent: own(m, "parent_block_hash"),
        tokenIds: own(m, "token_ids"),
        blockSize: own(m, "block_size"),
        loraId: own(m, "lora_id"),
        medium: own(m, "medium"),
        loraName: strOrNull(own(m, "lora_name")),
        cacheSalt: strOrNull(salt),
        groupIdx: own(m, "group_idx"),
        kind: own(m, "kv_cache_spec_kind"),
        window: own(m, "kv_cache_spec_sliding_window"),
        locality: own(m, "locality"),
      });
    }
    case "BlockRemoved":
      count(REMOVED_KEYS);
      return withHashes(
        {
          type: "BlockRemoved",
          blockHashes: NO_HASHES,
          medium: strOrNull(own(m, "medium")),
          groupIdx: intOrNull(own(m, "group_idx")),
          locality: strOrNull(own(m, "locality")),
        },
        own(m, "block_hashes"),
      );
    case "AllBlocksCleared":
      count(CLEARED_KEYS);
      return { type: "AllBlocksCleared" };
    default:
      return undefined;
  }
}

interface StoredFields {
  blockHashes: unknown;
  parent: unknown;
  tokenIds: unknown;
  blockSize: unknown;
  loraId: unknown;
  medium: unknown;
  loraName: string | null;
  cacheSalt: string | null;
  groupIdx: unknown;
  kind: unknown;
  window: unknown;
  locality: unknown;
  extraKeys: unknown;
}

function stored(f: StoredFields): BlockStored {
  const blockSize = f.blockSize;
  if (typeof blockSize !== "number" || !Number.isInteger(blockSize) || blockSize < 0) throw new Invalid();
  const tokenIds = tokenList(f.tokenIds);
  // 0 only on a store by hash alone: newer vLLM's OffloadingConnector reports its CPU copies with
  // `block_size=0, token_ids=[]` (offloading_connector.py take_events); src/kv credits them by hash.
  if (blockSize === 0 && tokenIds.length > 0) throw new Invalid();
  const parentBlockHash = f.parent === null || f.parent === undefined ? null : hashValue(f.parent);
  const extraKeys = extraKeyList(f.extraKeys);
  const hashes = f.blockHashes; // validated first, as before the pairs form existed
  const pairs = wantPairs && hashes instanceof U64Pairs ? hashes.words : null;
  const blockHashes = pairs === null ? hashList(hashes) : NO_HASHES;
  const ev: BlockStored = {
    type: "BlockStored",
    blockHashes,
    parentBlockHash,
    tokenIds,
    blockSize,
    loraId: intOrNull(f.loraId),
    medium: strOrNull(f.medium),
    loraName: f.loraName,
    cacheSalt: f.cacheSalt ?? (parentBlockHash === null ? saltOf(extraKeys?.[0], f.loraName) : null),
    groupIdx: intOrNull(f.groupIdx),
    kvCacheSpecKind: strOrNull(f.kind),
    slidingWindow: intOrNull(f.window),
    locality: strOrNull(f.locality),
  };
  if (extraKeys !== null) ev.extraKeys = extraKeys;
  if (wantPairs) ev.hashPairs = pairs ?? toPairs(blockHashes);
  if (wantPairs && pairs === null) ev.blockHashes = NO_HASHES;
  return ev;
}

/** A BlockRemoved's hash list: bigint[] normally, pairs under decodeKvEventBatchPairs. */
function withHashes(ev: BlockRemoved, v: unknown): BlockRemoved {
  if (wantPairs) ev.hashPairs = v instanceof U64Pairs ? v.words : toPairs(hashList(v));
  else ev.blockHashes = hashList(v);
  return ev;
}

function toPairs(hs: readonly bigint[]): Uint32Array {
  const out = new Uint32Array(2 * hs.length);
  for (let i = 0; i < hs.length; i++) {
    const h = hs[i]!;
    out[2 * i] = Number(h & 0xffffffffn);
    out[2 * i + 1] = Number(h >> 32n);
  }
  return out;
}

/** extra_keys as a list of per-block entries (null or a list); anything else is treated as absent. */
function extraKeyList(v: unknown): (unknown[] | null)[] | null {
  if (v instanceof U64Pairs) v = U64Pairs.plain(v);
  if (!Array.isArray(v)) return null;
  return v.map((e) => (Array.isArray(e) ? e : e instanceof U64Pairs ? U64Pairs.plain(e) : null));
}

/**
 * cache_salt among block 0's extra keys. vLLM's generate_block_hash_extra_keys concatenates
 * [lora_name] + multimodal tuples + [cache_salt] + [prompt-embeds bytes]: after the LoRA name (when
 * the event names one) the first string is the salt. Newer builds tag each key
 * (`{"type": "cache_salt", "salt": …}`), which is read by its tag.
 */
export function saltOf(keys: readonly unknown[] | null | undefined, loraName: string | null): string | null {
  if (!keys) return null;
  for (const k of keys) {
    if (isMap(k) && own(k, "type") === "cache_salt") return strOrNull(own(k, "salt") ?? own(k, "value"));
  }
  let i = loraName !== null && keys[0] === loraName ? 1 : 0;
  for (; i < keys.length; i++) if (typeof keys[i] === "string") return keys[i] as string;
  return null;
}

const U64 = (1n << 64n) - 1n;

/** An engine block hash as u64: ints (either sign), or bytes read big-endian keeping the low 64 bits. */
export function hashValue(v: unknown): bigint {
  // uint64 decodes in range already: compare rather than mask (a mask allocates a new BigInt).
  if (typeof v === "bigint") return v >= 0n && v <= U64 ? v : v & U64;
  if (typeof v === "number") {
    if (!Number.isSafeInteger(v)) throw new Invalid();
    return BigInt(v) & U64;
  }
  if (v instanceof Uint8Array) {
    // VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0 sends the raw digest; the int form vLLM would have sent
    // is int.from_bytes(h, "big") & (2**64 - 1), i.e. the last 8 bytes (docs/references.md#engines-1.7).
    if (v.length === 0) throw new Invalid();
    let x = 0n;
    for (let i = Math.max(0, v.length - 8); i < v.length; i++) x = (x << 8n) | BigInt(v[i]!);
    return x;
  }
  throw new Invalid();
}

function hashList(v: unknown): bigint[] {
  if (v instanceof Uint32Array) return Array.from(v, (x) => BigInt(x));
  if (!Array.isArray(v)) throw new Invalid();
  const out = new Array<bigint>(v.length);
  for (let i = 0; i < v.length; i++) out[i] = hashValue(v[i]);
  return out;
}

function tokenList(v: unknown): number[] | Uint32Array {
  if (v instanceof Uint32Array) return v; // packed by the reader: every element is a u32 already
  if (v instanceof U64Pairs) {
    // A short (< 8) or non-u32 int list under the pairs reader: u32 ids only, as below.
    const out = new Uint32Array(v.length);
    for (let i = 0; i < v.length; i++) {
      if (v.words[2 * i + 1] !== 0) throw new Invalid();
      out[i] = v.words[2 * i]!;
    }
    return out;
  }
  if (!Array.isArray(v)) throw new Invalid();
  for (let i = 0; i < v.length; i++) {
    const t = v[i];
    // Token ids are u32 on every engine; EAGLE bigram pairs are not supported (the event is skipped).
    if (typeof t !== "number" || !(t >= 0 && t <= 0xffffffff) || !Number.isInteger(t)) throw new Invalid();
  }
  return v as number[];
}

function intOrNull(v: unknown): number | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "number" && Number.isInteger(v)) return v;
  if (typeof v === "bigint" && v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER)) return Number(v);
  throw new Invalid();
}

function strOrNull(v: unknown): string | null {
  if (v === null || v === undefined) return null;
  if (typeof v === "string") return v;
  throw new Invalid();
}

function isMap(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !ArrayBuffer.isView(v) && !(v instanceof U64Pairs);
}

function own(m: Record<string, unknown>, k: string): unknown {
  return Object.hasOwn(m, k) ? m[k] : undefined;
}
