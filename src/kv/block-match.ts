// BlockIndex's prompt walk for up to 32 workers (block-index.ts findMatchesPairs keeps the general
// one): the GPU, GPU∪CPU and any-medium bitsets (the tiers of indexer.ts Overlap) in three locals,
// the chunked prefetch of the general walk, and a worker's depth per tier recorded where it drops out.
import type { Overlap } from "./indexer.ts";
import { homeSlot, ZERO_HI, ZERO_LO, type U64Table } from "./u64-table.ts";

/** Written by the prefetch loads so they are not optimised away. */
let sunk = 0;
const CHUNK = 64;
/** The current chunk's home slots, computed once for the touch and the probe. */
const homes = new Int32Array(CHUNK);

/**
 * findMatchesPairs for up to 32 workers (one bitset word per medium), the common case: the three
 * tiered bitsets live in locals instead of arrays. Same walk, same result. `first` = the slot of
 * the prompt's first block; `scratch` = 3 × 32 depths, reused.
 *
 * Per chunk of 64 blocks, each home slot is computed once: touched first (independent loads the
 * CPU overlaps: a prompt whose records are not in cache then costs a few misses' latency per
 * chunk, not one per block), then probed from, inline. With U64Table.touch() then find() per
 * block, the home was hashed twice and every call reloaded the table's fields: ~1.4× the time
 * (docs/benchmarks.md, "Issue 25, fourth pass on ingest").
 */
export function matchOneWord(
t: U64Table,
names: readonly (string | null)[],
pairs: Uint32Array,
n: number,
first: number,
scratch: Int32Array,
out: Map<string, Overlap>,
): Map<string, Overlap> {
  const v = t.data; // matching never inserts, so the array and its layout stay put
  const s = t.stride;
  const cap = t.cap;
  const scale = t.homeScale;
  const f = t.at(first);
  let a0 = v[f]! | 0;
  let a1 = a0 | v[f + 1]!;
  let a2 = a1 | v[f + 2]!;
  const depth = scratch.fill(-1);
  let i = 1;
  while (i < n && a2 !== 0) {
    const start = i;
    const end = Math.min(n, i + CHUNK);
    let sink = 0;
    for (let k = start; k < end; k++) {
      let lo = pairs[2 * k]!;
      let hi = pairs[2 * k + 1]!;
      if ((lo | hi) === 0) {
        lo = ZERO_LO;
        hi = ZERO_HI;
      }
      const h = homeSlot(lo, hi, scale);
      homes[k - start] = h;
      sink ^= v[h * s]!;
    }
    sunk ^= sink;
    for (; i < end && a2 !== 0; i++) {
      let lo = pairs[2 * i]!;
      let hi = pairs[2 * i + 1]!;
      if ((lo | hi) === 0) {
        lo = ZERO_LO;
        hi = ZERO_HI;
      }
      let h0 = 0;
      let h1 = 0;
      let h2 = 0;
      // U64Table.find from the precomputed home (linear probing; an empty key ends the run).
      for (let j = homes[i - start]!; ; j = j + 1 === cap ? 0 : j + 1) {
        const at = j * s;
        const k = v[at]!;
        const kh = v[at + 1]!;
        if (k === lo && kh === hi) {
          h0 = v[at + 2]! | 0;
          h1 = h0 | v[at + 3]!;
          h2 = h1 | v[at + 4]!;
          break;
        }
        if ((k | kh) === 0) break;
      }
      // a2 ⊇ a1 ⊇ a0 (tiers), so a worker still alive on GPU is alive on the others too.
      if ((a2 & ~h2) !== 0) {
        mark(depth, 64, a2 & ~h2, i);
        a2 &= h2;
      }
      if ((a1 & ~h1) !== 0) {
        mark(depth, 32, a1 & ~h1, i);
        a1 &= h1;
      }
      if ((a0 & ~h0) !== 0) {
        mark(depth, 0, a0 & ~h0, i);
        a0 &= h0;
      }
    }
  }
  mark(depth, 0, a0, i);
  mark(depth, 32, a1, i);
  mark(depth, 64, a2, i);
  for (let b = 0; b < 32; b++) {
    const d2 = depth[64 + b]!;
    if (d2 <= 0) continue;
    const name = names[b];
    if (name == null) continue;
    const d0 = Math.max(0, depth[b]!);
    const d1 = Math.max(d0, depth[32 + b]!);
    out.set(name, { gpu: d0, cpu: d1 - d0, disk: Math.max(d1, d2) - d1 });
  }
  return out;
}

/** depth[off + b] = at for every set bit b of `bits`. */
function mark(depth: Int32Array, off: number, bits: number, at: number): void {
  while (bits !== 0) {
    depth[off + 31 - Math.clz32(bits & -bits)] = at;
    bits &= bits - 1;
  }
}
