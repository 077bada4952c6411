// The production block index: one open-addressing table (u64-table.ts) from a block's sequence
// hash to three worker bitsets (GPU, CPU, disk). A worker is a bit position, so a 16-worker
// cluster costs 12 bytes of bitsets per distinct block; 33+ workers widen every bitset by one
// word. findMatches walks the prompt's hashes once, intersecting bitsets and recording the
// position at which each worker drops out; it stops as soon as no worker is left. The media are
// matched in tiers (indexer.ts Overlap): the CPU run continues through blocks held on GPU or CPU,
// the disk run through blocks held anywhere, so a bitset is OR-ed with the faster media's first;
// the result counts the blocks each medium adds (GPU run, then its CPU continuation, then disk).
import type { IndexEvent, IndexStats, KvIndex, Medium, Overlap, RemovalListener } from "./indexer.ts";
import { MEDIUM_INDEX } from "./indexer.ts";
import { matchOneWord } from "./block-match.ts";
import { U64Table, hi32, join64, lo32 } from "./u64-table.ts";

const NM = 3; // media

export class BlockIndex implements KvIndex {
  private table: U64Table;
  /** u32 words per medium bitset. */
  private words = 1;
  private slotOf = new Map<string, number>();
  private names: (string | null)[] = [];
  private free: number[] = [];
  private entries = 0;
  /** Written by findMatches' prefetch loads so they are not optimised away. */
  private sink = 0;
  /** matchOneWord's depths, [medium × 32 + bit] (reused). */
  private depth1 = new Int32Array(NM * 32);
  /** findMatches' per-block tiered bitsets (reused). */
  private held = new Uint32Array(NM);
  /** apply()'s hashes as u32 halves (reused). */
  private pairs = new Uint32Array(64);
  /** onRemoved subscribers; empty on the ingest hot path unless a router predicts. */
  private removalListeners: RemovalListener[] = [];
  /** Keeps applyPairs' prefetching loads alive (never read). */
  touched = 0;

  constructor(initialCapacity = 1024) {
    this.table = new U64Table(NM, initialCapacity);
  }

  /** slotFor's last answer: ingest applies runs of one worker's events (removeWorker forgets it). */
  private lastWorker: string | null = null;
  private lastSlot = 0;

  private slotFor(worker: string): number {
    if (worker === this.lastWorker) return this.lastSlot;
    let s = this.slotOf.get(worker);
    if (s !== undefined) {
      this.lastWorker = worker;
      this.lastSlot = s;
      return s;
    }
    s = this.free.pop() ?? this.names.length;
    if (s >= this.words * 32) this.widen(this.words + 1);
    this.slotOf.set(worker, s);
    this.names[s] = worker;
    return s;
  }

  private widen(words: number): void {
    const old = this.table;
    const ow = this.words;
    const t = new U64Table(NM * words, old.cap);
    for (let i = 0; i < old.cap; i++) {
      if (!old.used(i)) continue;
      const [lo, hi] = old.keyAt(i);
      const to = t.at(t.insert(lo, hi));
      const from = old.at(i);
      for (let m = 0; m < NM; m++) {
        for (let k = 0; k < ow; k++) t.data[to + m * words + k] = old.data[from + m * ow + k]!;
      }
    }
    this.table = t;
    this.words = words;
  }

  apply(worker: string, ev: IndexEvent, unchanged?: (i: number) => void): void {
    if (ev.kind === "cleared") return this.clearSlot(this.slotFor(worker));
    const hs = ev.hashes;
    if (this.pairs.length < 2 * hs.length) this.pairs = new Uint32Array(2 * hs.length);
    const p = this.pairs;
    for (let i = 0; i < hs.length; i++) {
      p[2 * i] = lo32(hs[i]!);
      p[2 * i + 1] = hi32();
    }
    this.applyPairs(worker, ev.kind, ev.medium, p, hs.length, unchanged);
  }

  /**
   * apply() for hashes given as u32 halves (`pairs[2i]` low, `pairs[2i + 1]` high; the first `n`),
   * the allocation-free form used by event ingest (worker-blocks.ts).
   */
  applyPairs(worker: string, kind: "stored" | "removed", medium: Medium, pairs: Uint32Array, n: number, unchanged?: (i: number) => void): void {
    const ws = this.slotFor(worker);
    const W = this.words;
    const off = MEDIUM_INDEX[medium] * W + (ws >>> 5);
    const bit = 1 << (ws & 31);
    const t = this.table;
    // Touch every home record first: independent loads overlap, so a run of n blocks in a large
    // table costs a few cache misses rather than n serial ones (the same trick as findMatchesPairs).
    let touched = 0;
    for (let i = 0; i < n; i++) touched |= t.touch(pairs[2 * i]!, pairs[2 * i + 1]!);
    this.touched = touched;
    if (kind === "stored") {
      for (let i = 0; i < n; i++) {
        const idx = t.at(t.insert(pairs[2 * i]!, pairs[2 * i + 1]!)) + off;
        const v = t.data; // read after insert: it may have grown the table
        if ((v[idx]! & bit) === 0) {
          v[idx] = v[idx]! | bit;
          this.entries++;
        } else {
          unchanged?.(i);
        }
      }
      return;
    }
    for (let i = 0; i < n; i++) {
      const slot = t.find(pairs[2 * i]!, pairs[2 * i + 1]!);
      const v = t.data;
      const idx = t.at(slot) + off;
      if (slot < 0 || (v[idx]! & bit) === 0) {
        unchanged?.(i);
        continue;
      }
      v[idx] = v[idx]! & ~bit;
      this.entries--;
      if (this.emptyAt(slot)) t.removeAt(slot);
    }
    if (this.removalListeners.length > 0) for (const l of this.removalListeners) l(worker, { medium, pairs, n });
  }

  onRemoved(listener: RemovalListener): () => void {
    this.removalListeners = [...this.removalListeners, listener];
    return () => void (this.removalListeners = this.removalListeners.filter((l) => l !== listener));
  }

  private emptyAt(slot: number): boolean {
    const v = this.table.data;
    for (let j = this.table.at(slot), end = j + NM * this.words; j < end; j++) if (v[j] !== 0) return false;
    return true;
  }

  holds(worker: string, hash: bigint, medium: Medium): boolean {
    const ws = this.slotOf.get(worker);
    if (ws === undefined) return false;
    const lo = lo32(hash);
    const hi = hi32();
    const slot = this.table.find(lo, hi);
    if (slot < 0) return false;
    const W = this.words;
    return (this.table.data[this.table.at(slot) + MEDIUM_INDEX[medium] * W + (ws >>> 5)]! & (1 << (ws & 31))) !== 0;
  }

  findMatches(hashes: readonly bigint[]): Map<string, Overlap> {
    const n = hashes.length;
    if (this.pairs.length < 2 * n) this.pairs = new Uint32Array(2 * n);
    const p = this.pairs;
    // Split the whole prompt up front: one sequential pass, then the walk reads u32 pairs only.
    for (let i = 0; i < n; i++) {
      p[2 * i] = lo32(hashes[i]!);
      p[2 * i + 1] = hi32();
    }
    return this.findMatchesPairs(p, n);
  }

  /**
   * findMatches() for hashes given as u32 halves (`pairs[2i]` low, `pairs[2i + 1]` high; the first
   * `n`), e.g. from hash.ts chainHashesU32: no BigInt on the way.
   */
  findMatchesPairs(pairs: Uint32Array, n: number): Map<string, Overlap> {
    const out = new Map<string, Overlap>();
    if (n === 0) return out;
    const t = this.table;
    const W = this.words;
    const stride = NM * W;
    const first = t.find(pairs[0]!, pairs[1]!);
    if (first < 0) return out;
    if (W === 1) return matchOneWord(t, this.names, pairs, n, first, this.depth1, out);
    const v = t.data; // findMatches never inserts, so the array stays put
    const alive = v.slice(t.at(first), t.at(first) + stride);
    // Tiers: medium m's word k also holds what the faster media hold (j − W is the next faster medium).
    for (let j = W; j < stride; j++) alive[j] = alive[j]! | alive[j - W]!;
    if (this.held.length < stride) this.held = new Uint32Array(stride);
    const held = this.held;
    // depth[(m * W + k) * 32 + b] = blocks matched by the worker at bit b of word k, medium m.
    const depth = new Int32Array(stride * 32).fill(-1);
    let live = 0;
    for (let j = 0; j < stride; j++) live |= alive[j]!;
    // Walk in chunks: first touch every home record of the chunk (independent loads the CPU
    // overlaps), then probe for real against a warm cache. Stop once no worker is left.
    const CHUNK = 64;
    let i = 1;
    while (i < n && live !== 0) {
      const start = i;
      const end = Math.min(n, start + CHUNK);
      let sink = 0;
      for (let k = start; k < end; k++) sink ^= t.touch(pairs[2 * k]!, pairs[2 * k + 1]!);
      this.sink ^= sink;
      for (; i < end && live !== 0; i++) {
        const slot = t.find(pairs[2 * i]!, pairs[2 * i + 1]!);
        const base = t.at(slot);
        live = 0;
        for (let j = 0; j < stride; j++) {
          const h = slot < 0 ? 0 : j < W ? v[base + j]! : v[base + j]! | held[j - W]!;
          held[j] = h;
          const prev = alive[j]!;
          if (prev === 0) continue;
          const now = prev & h;
          let dropped = prev & ~now;
          while (dropped !== 0) {
            const b = 31 - Math.clz32(dropped & -dropped);
            depth[j * 32 + b] = i;
            dropped &= dropped - 1;
          }
          alive[j] = now;
          live |= now;
        }
      }
    }
    for (let j = 0; j < stride; j++) {
      let rest = alive[j]!;
      while (rest !== 0) {
        const b = 31 - Math.clz32(rest & -rest);
        depth[j * 32 + b] = i;
        rest &= rest - 1;
      }
    }
    // Tiered depths d0 ≤ d1 ≤ d2 (GPU, GPU∪CPU, any) → blocks served by each medium in turn.
    for (let k = 0; k < W; k++) {
      for (let b = 0; b < 32; b++) {
        const d0 = Math.max(0, depth[k * 32 + b]!);
        const d1 = Math.max(d0, depth[(W + k) * 32 + b]!);
        const d2 = Math.max(d1, depth[(2 * W + k) * 32 + b]!);
        if (d2 <= 0) continue;
        const name = this.names[k * 32 + b];
        if (name == null) continue;
        out.set(name, { gpu: d0, cpu: d1 - d0, disk: d2 - d1 });
      }
    }
    return out;
  }

  /** Size the table for `blocks` distinct blocks up front (e.g. from the engines' KV capacity). */
  reserve(blocks: number): void {
    this.table.reserve(blocks);
  }

  removeWorker(worker: string): void {
    this.lastWorker = null; // its slot may be handed to another worker
    const ws = this.slotOf.get(worker);
    if (ws === undefined) return;
    this.clearSlot(ws);
    this.slotOf.delete(worker);
    this.names[ws] = null;
    this.free.push(ws);
  }

  clearWorker(worker: string): void {
    const ws = this.slotOf.get(worker);
    if (ws !== undefined) this.clearSlot(ws);
  }

  /** Clear one worker's bit everywhere: a full scan, fine for a rare event (~ms per million slots). */
  private clearSlot(ws: number): void {
    const name = this.names[ws];
    if (name && this.removalListeners.length > 0) for (const l of this.removalListeners) l(name, null);
    const t = this.table;
    const W = this.words;
    const word = ws >>> 5;
    const bit = 1 << (ws & 31);
    for (let slot = 0; slot < t.cap; ) {
      if (!t.used(slot)) {
        slot++;
        continue;
      }
      let touched = false;
      for (let m = 0; m < NM; m++) {
        const idx = t.at(slot) + m * W + word;
        if ((t.data[idx]! & bit) !== 0) {
          t.data[idx] = t.data[idx]! & ~bit;
          this.entries--;
          touched = true;
        }
      }
      // Backward-shift deletion may pull a later entry into this slot: look at it again.
      if (touched && this.emptyAt(slot)) t.removeAt(slot);
      else slot++;
    }
    t.maybeShrink();
  }

  size(): number {
    return this.table.count;
  }

  stats(): IndexStats {
    return { blocks: this.table.count, entries: this.entries, workers: this.slotOf.size, bytes: this.table.bytes() };
  }

  /** Visit every (worker, hash, medium) residency: admin dumps and tests. */
  forEachEntry(fn: (worker: string, hash: bigint, medium: Medium) => void): void {
    const t = this.table;
    const W = this.words;
    const media: Medium[] = ["gpu", "cpu", "disk"];
    for (let slot = 0; slot < t.cap; slot++) {
      if (!t.used(slot)) continue;
      const [lo, hi] = t.keyAt(slot);
      const h = join64(lo, hi);
      for (let m = 0; m < NM; m++) {
        for (let k = 0; k < W; k++) {
          let bits = t.data[t.at(slot) + m * W + k]!;
          while (bits !== 0) {
            const b = 31 - Math.clz32(bits & -bits);
            bits &= bits - 1;
            const name = this.names[k * 32 + b];
            if (name != null) fn(name, h, media[m]!);
          }
        }
      }
    }
  }

  /** Worker ids known to the index. */
  workers(): string[] {
    return [...this.slotOf.keys()];
  }
}

