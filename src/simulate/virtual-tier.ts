// The host's KV tier as `herd simulate` models it: an in-memory CPU tier of `capacityBlocks` blocks
// shared by every simulated engine of the host, LRU (a lookup hit refreshes a block), with the load
// time of the real sim engine's offload (engine/sim/offload.ts loadMs: bytes / GB/s, on the virtual
// clock). Each engine's scheduler gets `engine()` as its SchedulerOffload; `onChange` reports what
// the tier holds (herd block hashes) so the router's index can credit it as medium cpu, as
// src/tier/tier-key.ts tierIndexFeed does for the real tier.

import type { Clock } from "../core/clock.ts";
import { loadMs } from "../engine/sim/offload.ts";
import type { SchedulerOffload } from "../engine/sim/scheduler.ts";

export interface VirtualTierOptions {
  capacityBlocks: number;
  bytesPerBlock: number;
  loadGbPerS: number;
  timeScale: number;
}

export interface VirtualTierCounters {
  stored: number;
  evicted: number;
  lookups: number;
  loadedBlocks: number;
}

export class VirtualTier {
  readonly counters: VirtualTierCounters = { stored: 0, evicted: 0, lookups: 0, loadedBlocks: 0 };
  /** Held blocks in LRU order (Map insertion order; a hit re-inserts). */
  private readonly held = new Set<bigint>();

  constructor(
    readonly o: VirtualTierOptions,
    private readonly clock: Clock,
    private readonly onChange: (kind: "stored" | "removed", hash: bigint) => void = () => {},
  ) {}

  get size(): number {
    return this.held.size;
  }

  has(hash: bigint): boolean {
    return this.held.has(hash);
  }

  put(hash: bigint): void {
    if (this.o.capacityBlocks <= 0) return;
    if (this.held.delete(hash)) return void this.held.add(hash);
    while (this.held.size >= this.o.capacityBlocks) {
      const victim = this.held.values().next().value!;
      this.held.delete(victim);
      this.counters.evicted++;
      this.onChange("removed", victim);
    }
    this.held.add(hash);
    this.counters.stored++;
    this.onChange("stored", hash);
  }

  /** Leading blocks of herd[from..] held (refreshed as used). */
  leading(herd: readonly bigint[], from: number): number {
    let n = 0;
    while (from + n < herd.length && this.held.has(herd[from + n]!)) {
      const h = herd[from + n]!;
      this.held.delete(h);
      this.held.add(h);
      n++;
    }
    return n;
  }

  /** One engine's view: its evictions go in, its prefix misses look here and wait the load time. */
  engine(): SchedulerOffload {
    return {
      offloadEvicted: (_engineHash, herdHash) => this.put(herdHash),
      lookup: (herd, from, done) => {
        this.counters.lookups++;
        const n = this.leading(herd, from);
        this.counters.loadedBlocks += n;
        const ms = loadMs(this.o, n);
        if (ms > 0) this.clock.setTimer(ms, () => done(n));
        else done(n);
      },
    };
  }
}
