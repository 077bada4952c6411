// Chain results between the tokenizer threads and the event loop as a few flat typed arrays.
import type { ChainResult } from "./worker.ts";

/**
 * A chain result as seven flat arrays (per-piece ends into each). Posting one typed array per
 * piece and field cost ~8 µs each to send and again to receive on the event loop (a 40k-message
 * chat: 480k arrays, seconds of main-thread work); flat arrays cost a memcpy. pool.ts unpacks.
 */
export interface PackedChain {
  ids: Uint32Array;
  idEnds: Uint32Array;
  hashes: BigUint64Array;
  hashEnds: Uint32Array;
  tails: Uint32Array;
  tailEnds: Uint32Array;
  /** Per piece: the chain's last hash, or 0 with hasLast 0 (the low bit of lastFlags). */
  lasts: BigUint64Array;
  lastFlags: Uint8Array;
  hashMs: number;
}

function flat<T extends Uint32Array | BigUint64Array>(parts: readonly T[], make: (n: number) => T): { all: T; ends: Uint32Array } {
  let n = 0;
  for (const p of parts) n += p.length;
  const all = make(n);
  const ends = new Uint32Array(parts.length);
  let at = 0;
  parts.forEach((p, i) => {
    (all as Uint32Array).set(p as Uint32Array, at);
    at += p.length;
    ends[i] = at;
  });
  return { all, ends };
}

export function packChain(r: ChainResult): PackedChain {
  const ids = flat(r.ids, (n) => new Uint32Array(n));
  const hashes = flat(r.hashes, (n) => new BigUint64Array(n));
  const tails = flat(r.tails, (n) => new Uint32Array(n));
  const lasts = new BigUint64Array(r.lasts.length);
  const lastFlags = new Uint8Array(r.lasts.length);
  r.lasts.forEach((l, i) => {
    if (l !== null) {
      lasts[i] = l;
      lastFlags[i] = 1;
    }
  });
  return { ids: ids.all, idEnds: ids.ends, hashes: hashes.all, hashEnds: hashes.ends, tails: tails.all, tailEnds: tails.ends, lasts, lastFlags, hashMs: r.hashMs };
}

/**
 * The per-piece arrays of a packed result: copies, not views, because the memos keep them and
 * count their own bytes (a view would pin the whole request's buffer behind a 100-byte entry).
 */
export function unpackChain(p: PackedChain): ChainResult {
  const out: ChainResult = { ids: [], hashes: [], tails: [], lasts: [], hashMs: p.hashMs };
  let i0 = 0;
  let h0 = 0;
  let t0 = 0;
  for (let k = 0; k < p.idEnds.length; k++) {
    out.ids.push(copyU32(p.ids, i0, (i0 = p.idEnds[k]!)));
    out.hashes.push(copyU64(p.hashes, h0, (h0 = p.hashEnds[k]!)));
    out.tails.push(copyU32(p.tails, t0, (t0 = p.tailEnds[k]!)));
    out.lasts.push(p.lastFlags[k] ? p.lasts[k]! : null);
  }
  return out;
}

// An element loop, not TypedArray.prototype.slice: slice of a transferred buffer took ~10 µs per
// call in Bun 1.4 (1.7 s for a 40k-message chat), allocation plus a loop ~0.1 µs.
function copyU32(a: Uint32Array, from: number, to: number): Uint32Array {
  const out = new Uint32Array(to - from);
  for (let i = from; i < to; i++) out[i - from] = a[i]!;
  return out;
}

function copyU64(a: BigUint64Array, from: number, to: number): BigUint64Array {
  const out = new BigUint64Array(to - from);
  for (let i = from; i < to; i++) out[i - from] = a[i]!;
  return out;
}
