// Seeded generator of KV event batches in every shape the decoders meet (map and array events,
// known and unknown parents and removals, media, filters, LoRA, extra keys, salts, unknown keys,
// odd int widths, stores by hash alone), for the differential tests of the ingest fast path.
import { Encoder } from "@msgpack/msgpack";
import type { SeededRng } from "../../src/core/rng.ts";

const enc = new Encoder({ useBigInt64: true });

export interface GenState {
  /** Engine hashes handed out so far (removals and parents pick among them). */
  known: bigint[];
  next: bigint;
}

export const newGenState = (): GenState => ({ known: [], next: 1n });

const pick = <T>(rng: SeededRng, xs: readonly T[]): T => xs[rng.int(xs.length)]!;

/** An engine hash in one of the widths msgpack gives it (small, u32, u64, negative). */
function freshHash(rng: SeededRng, st: GenState): bigint | number {
  st.next++;
  const r = rng.int(10);
  const h = r < 5 ? st.next : r < 8 ? (st.next << 40n) ^ 0xfedcba9876543210n : -st.next;
  st.known.push(typeof h === "bigint" && h < 0n ? h & ((1n << 64n) - 1n) : h);
  // As an int when it fits (the encoder then picks a narrow encoding), else as a BigInt.
  return h >= -(2n ** 31n) && h < 2n ** 31n ? Number(h) : h;
}

function knownHash(rng: SeededRng, st: GenState): bigint | number {
  if (st.known.length === 0 || rng.int(8) === 0) return 999_999_999n + BigInt(rng.int(1000)); // unknown
  const h = st.known[st.known.length - 1 - rng.int(Math.min(st.known.length, 40))]!;
  return h < 2n ** 31n ? Number(h) : h;
}

function event(rng: SeededRng, st: GenState, asArray: boolean): unknown {
  const r = rng.int(80);
  const medium = pick(rng, ["GPU", "GPU", "GPU", "CPU", "CPU_PINNED", null, "DISK", "weird"] as const);
  if (r < 36) {
    const bs = rng.int(10) === 0 ? 8 : 4;
    const k = 1 + rng.int(5);
    const hashes = Array.from({ length: k }, () => freshHash(rng, st));
    const byHash = rng.int(12) === 0;
    const parent = byHash || rng.int(4) === 0 ? null : knownHash(rng, st);
    const nTok = byHash ? 0 : rng.int(8) === 0 ? k * bs - 1 - rng.int(3) : k * bs;
    const tokens = Array.from({ length: Math.max(0, nTok) }, () => (rng.int(6) === 0 ? rng.int(100) : rng.int(200_000)));
    const blockSize = byHash && rng.int(2) === 0 ? 0 : bs;
    const lora = rng.int(10) === 0 ? "adapter-a" : null;
    const group = pick(rng, [null, null, null, 0, 1] as const);
    const kind = pick(rng, [null, null, null, "full_attention", "sliding_window"] as const);
    const locality = pick(rng, [null, null, null, "LOCAL", "REMOTE"] as const);
    const extra = pick(rng, [undefined, undefined, null, "nulls", "salt", "mm"] as const);
    const extraKeys = extra === "nulls" ? hashes.map(() => null) : extra === "salt" ? [["salt-1"], ...hashes.slice(1).map(() => null)] : extra === "mm" ? [[["img", 0]]] : extra;
    if (asArray) {
      const a: unknown[] = ["BlockStored", hashes, parent, tokens, blockSize, rng.int(5) === 0 ? 3 : null, medium, lora];
      if (rng.int(3) === 0) a.push(extraKeys ?? null, group, kind, rng.int(4) === 0 ? 128 : null);
      if (rng.int(15) === 0) a[7] = { cache_salt: "s2" };
      while (a.length > 6 && a[a.length - 1] === null && rng.int(2) === 0) a.pop();
      return a;
    }
    const m: Record<string, unknown> = { type: "BlockStored", block_hashes: hashes, parent_block_hash: parent, token_ids: tokens, block_size: blockSize, lora_id: null, medium, lora_name: lora };
    if (extraKeys !== undefined) m.extra_keys = extraKeys;
    if (group !== null || rng.int(4) === 0) m.group_idx = group;
    if (kind !== null) m.kv_cache_spec_kind = kind;
    if (locality !== null) m.locality = locality;
    if (rng.int(12) === 0) m.cache_salt = "s3";
    if (rng.int(10) === 0) m.ownership = "OWNED";
    if (rng.int(10) === 0) m.event_version = 2;
    if (rng.int(25) === 0) m.mystery = [1, 2];
    return m;
  }
  if (r < 79) {
    const hashes = Array.from({ length: 1 + (rng.int(4) === 0 ? rng.int(3) : 0) }, () => knownHash(rng, st));
    const group = pick(rng, [null, null, null, 0, 1] as const);
    if (asArray) {
      const a: unknown[] = ["BlockRemoved", hashes, medium];
      if (group !== null) a.push(group);
      return a;
    }
    const m: Record<string, unknown> = { type: "BlockRemoved", block_hashes: hashes, medium };
    if (group !== null) m.group_idx = group;
    if (rng.int(10) === 0) m.locality = pick(rng, ["LOCAL", "REMOTE"]);
    if (rng.int(20) === 0) m.session_id = "x";
    if (rng.int(30) === 0) m.event_version = 1; // not a removal key: counted unknown by the reference
    return m;
  }
  return asArray ? ["AllBlocksCleared"] : rng.int(10) === 0 ? { type: "AllBlocksCleared", extra: 1 } : { type: "AllBlocksCleared" };
}

/** One encoded batch of 1–40 events (events mostly of one format, as an engine sends them). */
export function genBatch(rng: SeededRng, st: GenState, ts: number): Uint8Array {
  const asArray = rng.int(3) === 0;
  const n = 1 + rng.int(rng.int(4) === 0 ? 40 : 8);
  const events = Array.from({ length: n }, () => event(rng, st, rng.int(20) === 0 ? !asArray : asArray));
  const r = rng.int(20);
  const env = r === 0 ? { ts, events } : r < 8 ? [ts, events, rng.int(3) === 0 ? null : 0] : [r === 8 ? Math.floor(ts) : ts, events];
  return enc.encode(env);
}

/** A copy of `bytes` with 1–3 bytes replaced, mostly by msgpack headers. */
export function mutate(rng: SeededRng, bytes: Uint8Array): Uint8Array {
  const heads = [0xcf, 0xd3, 0xd2, 0xd1, 0xd0, 0xcc, 0xcd, 0xce, 0xff, 0xe0, 0x00, 0x91, 0xc4, 0xc0, 0xa3, 0xcb, 0xdc];
  const b = Uint8Array.from(bytes);
  for (let m = 1 + rng.int(3); m > 0; m--) b[rng.int(b.length)] = rng.int(2) ? heads[rng.int(heads.length)]! : rng.int(256);
  return b;
}
