// The production block index: one open-addressing table (u64-table.ts) from a block's sequence
// hash to three worker bitsets (GPU, CPU, disk). A worker is a bit position, so a 16-worker
// cluster costs 12 bytes of bitsets per distinct block; 33+ workers widen every bitset by one
// word. findMatches walks the prompt's hashes once, intersecting bitsets and recording the
// position at which each worker drops out; it stops as soon as no worker is left.
import type { IndexEvent, IndexStats, KvIndex, Medium, Overlap } from "./indexer.ts";
import { MEDIUM_INDEX } from "./indexer.ts";
import { U64Table, halves, join64 } from "./u64-table.ts";

const NM = 3; // media

export class BlockIndex implements KvIndex {
  private table: U64Table;
  /** u32 words per medium bitset. */
  private words = 1;
  private slotOf = new Map<string, number>();
  private names: (string | null)[] = [];
  private free: number[] = [];
  private entries = 0;

  constructor(initialCapacity = 1024) {
    this.table = new U64Table(NM, initialCapacity);
  }

  private slotFor(worker: string): number {
    let s = this.slotOf.get(worker);
    if (s !== undefined) return s;
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
      if (old.used[i] === 0) continue;
      const s = t.insert(old.keyLo[i]!, old.keyHi[i]!);
      for (let m = 0; m < NM; m++) {
        for (let k = 0; k < ow; k++) t.vals[s * NM * words + m * words + k] = old.vals[i * NM * ow + m * ow + k]!;
      }
    }
    this.table = t;
    this.words = words;
  }

  apply(worker: string, ev: IndexEvent): void {
    const ws = this.slotFor(worker);
    if (ev.kind === "cleared") return this.clearSlot(ws);
    const W = this.words;
    const stride = NM * W;
    const off = MEDIUM_INDEX[ev.medium] * W + (ws >>> 5);
    const bit = 1 << (ws & 31);
    const hs = ev.hashes;
    if (ev.kind === "stored") {
      for (let i = 0; i < hs.length; i++) {
        const [lo, hi] = halves(hs[i]!);
        const idx = this.table.insert(lo, hi) * stride + off;
        const v = this.table.vals;
        if ((v[idx]! & bit) === 0) {
          v[idx] = v[idx]! | bit;
          this.entries++;
        }
      }
      return;
    }
    for (let i = 0; i < hs.length; i++) {
      const [lo, hi] = halves(hs[i]!);
      const slot = this.table.find(lo, hi);
      if (slot < 0) continue;
      const v = this.table.vals;
      const idx = slot * stride + off;
      if ((v[idx]! & bit) === 0) continue;
      v[idx] = v[idx]! & ~bit;
      this.entries--;
      if (this.emptyAt(slot)) this.table.removeAt(slot);
    }
  }

  private emptyAt(slot: number): boolean {
    const v = this.table.vals;
    const stride = NM * this.words;
    for (let j = slot * stride, end = j + stride; j < end; j++) if (v[j] !== 0) return false;
    return true;
  }

  holds(worker: string, hash: bigint, medium: Medium): boolean {
    const ws = this.slotOf.get(worker);
    if (ws === undefined) return false;
    const [lo, hi] = halves(hash);
    const slot = this.table.find(lo, hi);
    if (slot < 0) return false;
    const W = this.words;
    return (this.table.vals[slot * NM * W + MEDIUM_INDEX[medium] * W + (ws >>> 5)]! & (1 << (ws & 31))) !== 0;
  }

  findMatches(hashes: readonly bigint[]): Map<string, Overlap> {
    const out = new Map<string, Overlap>();
    const n = hashes.length;
    if (n === 0) return out;
    const t = this.table;
    const W = this.words;
    const stride = NM * W;
    const [lo0, hi0] = halves(hashes[0]!);
    const first = t.find(lo0, hi0);
    if (first < 0) return out;
    const alive = t.vals.slice(first * stride, first * stride + stride);
    // depth[(m * W + k) * 32 + b] = blocks matched by the worker at bit b of word k, medium m.
    const depth = new Int32Array(stride * 32).fill(-1);
    let live = 0;
    for (let j = 0; j < stride; j++) live |= alive[j]!;
    let i = 1;
    for (; i < n && live !== 0; i++) {
      const [lo, hi] = halves(hashes[i]!);
      const slot = t.find(lo, hi);
      const v = t.vals; // re-read: find never reallocates, but keep the access local
      const base = slot * stride;
      live = 0;
      for (let j = 0; j < stride; j++) {
        const prev = alive[j]!;
        if (prev === 0) continue;
        const now = slot < 0 ? 0 : prev & v[base + j]!;
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
    for (let j = 0; j < stride; j++) {
      let rest = alive[j]!;
      while (rest !== 0) {
        const b = 31 - Math.clz32(rest & -rest);
        depth[j * 32 + b] = i;
        rest &= rest - 1;
      }
    }
    for (let m = 0; m < NM; m++) {
      for (let k = 0; k < W; k++) {
        for (let b = 0; b < 32; b++) {
          const d = depth[(m * W + k) * 32 + b]!;
          if (d <= 0) continue;
          const name = this.names[k * 32 + b];
          if (name == null) continue;
          let o = out.get(name);
          if (!o) out.set(name, (o = { gpu: 0, cpu: 0, disk: 0 }));
          if (m === 0) o.gpu = d;
          else if (m === 1) o.cpu = d;
          else o.disk = d;
        }
      }
    }
    return out;
  }

  removeWorker(worker: string): void {
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
    const t = this.table;
    const W = this.words;
    const stride = NM * W;
    const word = ws >>> 5;
    const bit = 1 << (ws & 31);
    for (let slot = 0; slot < t.cap; ) {
      if (t.used[slot] === 0) {
        slot++;
        continue;
      }
      let touched = false;
      for (let m = 0; m < NM; m++) {
        const idx = slot * stride + m * W + word;
        if ((t.vals[idx]! & bit) !== 0) {
          t.vals[idx] = t.vals[idx]! & ~bit;
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
      if (t.used[slot] === 0) continue;
      const h = join64(t.keyLo[slot]!, t.keyHi[slot]!);
      for (let m = 0; m < NM; m++) {
        for (let k = 0; k < W; k++) {
          let bits = t.vals[slot * NM * W + m * W + k]!;
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
