// Open-addressing hash table keyed by a 64-bit value held as two u32 halves, with a fixed number of
// u32 value words per slot, all in ONE typed array of records [lo, hi, v0, v1, …]: a probe touches
// one cache line, which is what makes a 2,000-block match over a million blocks fast. A
// Map<bigint, …> costs well over 100 bytes per entry; this costs 4·(2 + valueWords) bytes per slot
// at 50–75 % load. Linear probing with backward-shift deletion (no tombstones), so long-lived
// tables with churn never degrade; capacity grows by 1.5× (not 2×) to keep memory per entry low.
//
// Key (0, 0) marks an empty slot; the one real key with both halves zero is stored as ZERO_KEY
// (a 2^-64 chance of merging two blocks' identities, harmless for a cache index).
// Slot numbers are only valid until the next insert (which may grow the table).

const split = new BigUint64Array(1);
const splitU32 = new Uint32Array(split.buffer);

/** Low u32 of a u64; the high half is then available from hi32() (no BigInt arithmetic). */
export function lo32(h: bigint): number {
  split[0] = h;
  return splitU32[0]!;
}
/** High u32 of the value last passed to lo32 (callers pair the two calls). */
export function hi32(): number {
  return splitU32[1]!;
}
export function join64(lo: number, hi: number): bigint {
  splitU32[0] = lo;
  splitU32[1] = hi;
  return split[0]!;
}

/** The stored form of the key (0, 0): (0, 0) itself marks an empty slot. */
export const ZERO_LO = 0x7f4a7c15;
export const ZERO_HI = 0x9e3779b9;
// Linear probing: deletions shift the rest of a cluster back, and clusters grow fast past ~0.75.
const MAX_LOAD = 0.75;
const MIN_CAP = 16;
// reserve() sizes for this load: a table sized for an engine's capacity sits there for good once
// the engine is full, and at 0.75 a linear-probing miss scans ~8.5 slots (each removal's backward
// shift walks its cluster, hashing every key in it). 0.6 (~3.6) gave +15–20 % steady-state ingest
// (stores + removals at capacity) over 0.75 and beat 0.5 (more cache misses) in alternating runs
// (docs/benchmarks.md, issue 25); ~33 B per reserved slot-entry of a 5-word table instead of ~27.
const RESERVE_LOAD = 0.6;

function mix(lo: number, hi: number): number {
  const h = Math.imul(lo ^ Math.imul(hi, 0x9e3779b1), 0x85ebca77);
  return (h ^ (h >>> 15)) >>> 0;
}

/**
 * The home slot of a key in a table whose `homeScale` is `scale` (U64Table.home, for loops outside
 * the class that compute a run of homes once, touch them, then probe from them: block-match.ts).
 * Keys (0, 0) must be given as (ZERO_LO, ZERO_HI).
 */
export function homeSlot(lo: number, hi: number, scale: number): number {
  return (mix(lo, hi) * scale) | 0;
}

export class U64Table {
  /** Records of `stride` words: [keyLo, keyHi, value words…]. */
  data: Uint32Array;
  readonly stride: number;
  cap: number;
  count = 0;
  /** Whether the last insert() added the key (false: it was already present). */
  inserted = false;
  private scale: number;

  constructor(
    readonly valueWords: number,
    initialCapacity = 64,
  ) {
    this.stride = 2 + valueWords;
    this.cap = Math.max(MIN_CAP, Math.ceil(initialCapacity));
    this.scale = this.cap / 4294967296;
    this.data = new Uint32Array(this.cap * this.stride);
  }

  /** Word offset of a slot's first value word. */
  at(slot: number): number {
    return slot * this.stride + 2;
  }

  private home(lo: number, hi: number): number {
    return (mix(lo, hi) * this.scale) | 0;
  }

  /** cap / 2^32: homeSlot(lo, hi, homeScale) is a key's home. Changes when the table is rebuilt. */
  get homeScale(): number {
    return this.scale;
  }

  /**
   * Read the key's home record without probing. Loads with no data-dependent branch can overlap
   * in the CPU, so touching a run of keys first turns ~N serial cache misses into a few; the
   * following find() calls then hit the cache. Returns a word only to keep the load alive.
   */
  touch(lo: number, hi: number): number {
    return this.data[this.home(lo, hi) * this.stride]!;
  }

  /** Slot holding the key, or -1. */
  find(lo: number, hi: number): number {
    if ((lo | hi) === 0) {
      lo = ZERO_LO;
      hi = ZERO_HI;
    }
    const d = this.data;
    const s = this.stride;
    const cap = this.cap;
    for (let i = this.home(lo, hi); ; i = i + 1 === cap ? 0 : i + 1) {
      const k = d[i * s]!;
      const kh = d[i * s + 1]!;
      if (k === lo && kh === hi) return i;
      if ((k | kh) === 0) return -1;
    }
  }

  /** Slot of the key, inserting it with zeroed values if absent. */
  insert(lo: number, hi: number): number {
    if ((lo | hi) === 0) {
      lo = ZERO_LO;
      hi = ZERO_HI;
    }
    if (this.count + 1 > this.cap * MAX_LOAD) this.resize(Math.ceil(this.cap * 1.5));
    const d = this.data;
    const s = this.stride;
    const cap = this.cap;
    for (let i = this.home(lo, hi); ; i = i + 1 === cap ? 0 : i + 1) {
      const k = d[i * s]!;
      const kh = d[i * s + 1]!;
      if (k === lo && kh === hi) {
        this.inserted = false;
        return i;
      }
      if ((k | kh) === 0) {
        d[i * s] = lo;
        d[i * s + 1] = hi;
        this.count++;
        this.inserted = true;
        return i;
      }
    }
  }

  used(slot: number): boolean {
    return (this.data[slot * this.stride]! | this.data[slot * this.stride + 1]!) !== 0;
  }

  /** The key stored at a used slot (ZERO_KEY reads back as 0). */
  keyAt(slot: number): [number, number] {
    const lo = this.data[slot * this.stride]!;
    const hi = this.data[slot * this.stride + 1]!;
    return lo === ZERO_LO && hi === ZERO_HI ? [0, 0] : [lo, hi];
  }

  /** Delete the entry at `slot`, shifting later entries of its probe run back into the hole. */
  removeAt(slot: number): void {
    const d = this.data;
    const s = this.stride;
    const cap = this.cap;
    let hole = slot;
    for (let j = slot + 1 === cap ? 0 : slot + 1; (d[j * s]! | d[j * s + 1]!) !== 0; j = j + 1 === cap ? 0 : j + 1) {
      const home = this.home(d[j * s]!, d[j * s + 1]!);
      // Move j into the hole unless its home lies cyclically in (hole, j].
      const stays = hole <= j ? home > hole && home <= j : home > hole || home <= j;
      if (stays) continue;
      for (let k = 0; k < s; k++) d[hole * s + k] = d[j * s + k]!;
      hole = j;
    }
    for (let k = 0; k < s; k++) d[hole * s + k] = 0;
    this.count--;
  }

  clear(): void {
    this.count = 0;
    if (this.cap > 1024) this.resize(64);
    else this.data.fill(0);
  }

  /** Rebuild with a new capacity (entries kept). */
  resize(newCap: number): void {
    const old = this.data;
    const s = this.stride;
    const oldCap = this.cap;
    const cap = Math.max(MIN_CAP, Math.ceil(newCap), Math.ceil(this.count / MAX_LOAD) + 1);
    this.cap = cap;
    this.scale = cap / 4294967296;
    const d = new Uint32Array(cap * s);
    this.data = d;
    if (this.count === 0) return; // clear() empties by count: the old records are garbage
    // Keys are distinct and the load is below MAX_LOAD: place each record in the first empty slot
    // from its home, without insert()'s duplicate check and growth test. Old slots are walked in
    // order and homes scale monotonically, so the writes go mostly forward through the new array.
    for (let i = 0; i < oldCap; i++) {
      const from = i * s;
      const lo = old[from]!;
      const hi = old[from + 1]!;
      if ((lo | hi) === 0) continue;
      let j = this.home(lo, hi);
      while ((d[j * s]! | d[j * s + 1]!) !== 0) j = j + 1 === cap ? 0 : j + 1;
      const to = j * s;
      for (let k = 0; k < s; k++) d[to + k] = old[from + k]!;
    }
  }

  /**
   * Make room for `entries` keys at RESERVE_LOAD (one rebuild now, if any), so the table holds them
   * without growing and without running at the 0.75 growth threshold: a table that grew on its own
   * may sit anywhere in (0.5, 0.75] once its engine is full, and is rebuilt to 0.6 here too.
   */
  reserve(entries: number): void {
    if (entries > this.cap * RESERVE_LOAD) this.resize(Math.ceil(entries / RESERVE_LOAD) + 1);
  }

  /** Shrink when mostly empty after deletions (keeps memory proportional to live entries). */
  maybeShrink(): void {
    if (this.cap > 1024 && this.count < this.cap * 0.2) this.resize(Math.max(64, this.count * 1.6));
  }

  bytes(): number {
    return this.data.byteLength;
  }
}
