// Per-engine log of evicted KV blocks: herd block hash → the engine's eviction counter at eviction,
// for the last `horizon` evictions only (a FIFO ring over a compact U64Table; a Map<bigint, …> over
// millions of evictions took gigabytes). A block stored again leaves the log.
import { U64Table, hi32, lo32 } from "../kv/u64-table.ts";

export class EvictionLog {
  private readonly table = new U64Table(1, 1024);
  private readonly ringLo: Uint32Array;
  private readonly ringHi: Uint32Array;
  /** Evictions so far; the next one gets this stamp. */
  count = 0;

  constructor(readonly horizon: number) {
    this.ringLo = new Uint32Array(Math.max(1, horizon));
    this.ringHi = new Uint32Array(Math.max(1, horizon));
  }

  evicted(h: bigint): void {
    const lo = lo32(h);
    const hi = hi32();
    const p = this.count % this.ringLo.length;
    if (this.count >= this.ringLo.length) {
      // The eviction falling out of the horizon is forgotten, unless that block was evicted again since.
      const s = this.table.find(this.ringLo[p]!, this.ringHi[p]!);
      if (s >= 0 && this.table.data[this.table.at(s)] === (this.count - this.ringLo.length) >>> 0) this.table.removeAt(s);
    }
    const slot = this.table.insert(lo, hi);
    this.table.data[this.table.at(slot)] = this.count >>> 0;
    this.ringLo[p] = lo;
    this.ringHi[p] = hi;
    this.count++;
  }

  stored(h: bigint): void {
    const s = this.table.find(lo32(h), hi32());
    if (s >= 0) this.table.removeAt(s);
  }

  /** Evictions since `h` was evicted, or undefined when it is not in the log. */
  distance(h: bigint): number | undefined {
    const s = this.table.find(lo32(h), hi32());
    return s < 0 ? undefined : this.count - this.table.data[this.table.at(s)]!;
  }

  clear(): void {
    this.table.clear();
  }

  get size(): number {
    return this.table.count;
  }
}
