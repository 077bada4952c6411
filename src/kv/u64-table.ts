// Open-addressing hash table keyed by a 64-bit value held as two u32 halves, with a fixed number of
// u32 value words per slot, all in typed arrays. A Map<bigint, …> costs well over 100 bytes per
// entry; this costs (8 + 4·valueWords + 1) bytes per slot at 40–80 % load. Linear probing with
// backward-shift deletion (no tombstones), so long-lived tables with churn never degrade.
//
// Slot numbers are only valid until the next insert (which may grow the table).

const split = new BigUint64Array(1);
const splitU32 = new Uint32Array(split.buffer);

/** Low and high u32 halves of a u64 (no BigInt arithmetic, so no allocation). */
export function halves(h: bigint): [number, number] {
  split[0] = h;
  return [splitU32[0]!, splitU32[1]!];
}
export function lo32(h: bigint): number {
  split[0] = h;
  return splitU32[0]!;
}
export function hi32(): number {
  // High half of the value last passed to lo32 (callers pair the two calls).
  return splitU32[1]!;
}
export function join64(lo: number, hi: number): bigint {
  splitU32[0] = lo;
  splitU32[1] = hi;
  return split[0]!;
}

const MAX_LOAD = 0.8;

function mix(lo: number, hi: number): number {
  let h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca77);
  return h ^ (h >>> 15);
}

export class U64Table {
  keyLo: Uint32Array;
  keyHi: Uint32Array;
  vals: Uint32Array;
  used: Uint8Array;
  cap: number;
  private mask: number;
  count = 0;

  constructor(
    public valueWords: number,
    initialCapacity = 64,
  ) {
    let cap = 16;
    while (cap < initialCapacity) cap *= 2;
    this.cap = cap;
    this.mask = cap - 1;
    this.keyLo = new Uint32Array(cap);
    this.keyHi = new Uint32Array(cap);
    this.vals = new Uint32Array(cap * valueWords);
    this.used = new Uint8Array(cap);
  }

  /** Slot holding the key, or -1. */
  find(lo: number, hi: number): number {
    const m = this.mask;
    for (let i = mix(lo, hi) & m; ; i = (i + 1) & m) {
      if (this.used[i] === 0) return -1;
      if (this.keyLo[i] === lo && this.keyHi[i] === hi) return i;
    }
  }

  /** Slot of the key, inserting it with zeroed values if absent. */
  insert(lo: number, hi: number): number {
    if ((this.count + 1) > this.cap * MAX_LOAD) this.rehash(this.cap * 2, this.valueWords);
    const m = this.mask;
    for (let i = mix(lo, hi) & m; ; i = (i + 1) & m) {
      if (this.used[i] === 0) {
        this.used[i] = 1;
        this.keyLo[i] = lo;
        this.keyHi[i] = hi;
        this.count++;
        return i;
      }
      if (this.keyLo[i] === lo && this.keyHi[i] === hi) return i;
    }
  }

  /** Delete the entry at `slot`, shifting later entries of its probe run back into the hole. */
  removeAt(slot: number): void {
    const m = this.mask;
    const w = this.valueWords;
    let hole = slot;
    for (let j = (slot + 1) & m; this.used[j] === 1; j = (j + 1) & m) {
      const home = mix(this.keyLo[j]!, this.keyHi[j]!) & m;
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const inRange = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (inRange) continue;
      this.keyLo[hole] = this.keyLo[j]!;
      this.keyHi[hole] = this.keyHi[j]!;
      this.vals.copyWithin(hole * w, j * w, j * w + w);
      hole = j;
    }
    this.used[hole] = 0;
    this.vals.fill(0, hole * w, hole * w + w);
    this.count--;
  }

  clear(): void {
    this.count = 0;
    if (this.cap > 1024) {
      this.cap = 64;
      this.mask = 63;
      this.keyLo = new Uint32Array(64);
      this.keyHi = new Uint32Array(64);
      this.vals = new Uint32Array(64 * this.valueWords);
      this.used = new Uint8Array(64);
    } else {
      this.used.fill(0);
      this.vals.fill(0);
    }
  }

  /** Rebuild with a new capacity and/or value width (extra words are zero; fewer words truncate). */
  rehash(newCap: number, newWords: number): void {
    const { keyLo, keyHi, vals, used, cap, valueWords } = this;
    let c = 16;
    while (c < newCap) c *= 2;
    this.cap = c;
    this.mask = c - 1;
    this.valueWords = newWords;
    this.keyLo = new Uint32Array(c);
    this.keyHi = new Uint32Array(c);
    this.vals = new Uint32Array(c * newWords);
    this.used = new Uint8Array(c);
    this.count = 0;
    const copy = Math.min(valueWords, newWords);
    for (let i = 0; i < cap; i++) {
      if (used[i] === 0) continue;
      const s = this.insert(keyLo[i]!, keyHi[i]!);
      for (let k = 0; k < copy; k++) this.vals[s * newWords + k] = vals[i * valueWords + k]!;
    }
  }

  /** Shrink when mostly empty after deletions (keeps memory proportional to live entries). */
  maybeShrink(): void {
    if (this.cap > 1024 && this.count < this.cap * 0.15) this.rehash(Math.max(64, this.count * 2.5), this.valueWords);
  }

  bytes(): number {
    return this.keyLo.byteLength + this.keyHi.byteLength + this.vals.byteLength + this.used.byteLength;
  }
}
