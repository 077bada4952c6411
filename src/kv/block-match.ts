// BlockIndex's prompt walk for up to 32 workers (block-index.ts findMatchesPairs keeps the general
// one): the GPU, GPU∪CPU and any-medium bitsets (the tiers of indexer.ts Overlap) in three locals,
// the chunked prefetch of the general walk, and a worker's depth per tier recorded where it drops out.
import type { Overlap } from "./indexer.ts";
import type { U64Table } from "./u64-table.ts";

/** Written by the prefetch loads so they are not optimised away. */
let sunk = 0;

/**
 * findMatchesPairs for up to 32 workers (one bitset word per medium), the common case: the three
 * tiered bitsets live in locals instead of arrays. Same walk, same result. `first` = the slot of
 * the prompt's first block; `scratch` = 3 × 32 depths, reused.
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
  const v = t.data;
  const f = t.at(first);
  let a0 = v[f]! | 0;
  let a1 = a0 | v[f + 1]!;
  let a2 = a1 | v[f + 2]!;
  const depth = scratch.fill(-1);
  const CHUNK = 64;
  let i = 1;
  while (i < n && a2 !== 0) {
    const end = Math.min(n, i + CHUNK);
    let sink = 0;
    for (let k = i; k < end; k++) sink ^= t.touch(pairs[2 * k]!, pairs[2 * k + 1]!);
    sunk ^= sink;
    for (; i < end && a2 !== 0; i++) {
      const slot = t.find(pairs[2 * i]!, pairs[2 * i + 1]!);
      let h0 = 0;
      let h1 = 0;
      let h2 = 0;
      if (slot >= 0) {
        const b = t.at(slot);
        h0 = v[b]! | 0;
        h1 = h0 | v[b + 1]!;
        h2 = h1 | v[b + 2]!;
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
