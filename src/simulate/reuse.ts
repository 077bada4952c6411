// The workload questions an operator asks before adding a layer, counted while a simulation runs:
// - SharingStats: how much prefix the requests share — the share of prompt blocks whose (chained)
//   hash an earlier request's prompt already had. With chained hashes a block seen before means its
//   whole prefix was seen before, so this is the hit rate of one infinite prefix cache.
// - ReuseStats: what a CPU tier would add — at dispatch, after the blocks found on the chosen
//   engine's GPU, how many of the following blocks that engine had evicted, and how many evictions
//   ago (kv.ts). An LRU CPU tier of X blocks fed by GPU evictions still holds a block iff that
//   distance < X, so the extra prefix it would serve for each X is counted here.

import { U64Table, hi32, lo32 } from "../kv/u64-table.ts";

/** CPU-tier sizes considered, as multiples of one engine's GPU KV capacity. */
export const CPU_TIERS = [0.5, 1, 2, 4, 8] as const;
/** Histogram edges of eviction distance, in GPU capacities (evictions are remembered up to 8× back). */
export const DISTANCE_EDGES = [0.25, 0.5, 1, 2, 4] as const;

/** Distinct hashes remembered for the sharing figure (bounded memory; beyond it new ones are not added). */
const SHARING_MAX_HASHES = 4_000_000;

export class SharingStats {
  // A compact u64 set (a Set<bigint> of millions of hashes was a tenth of a long run's time).
  private readonly seen = new U64Table(0, 4096);
  blocks = 0;
  seenBefore = 0;
  /** True once the bound was hit: later first-time blocks were not remembered (the share is then a lower bound). */
  saturated = false;

  add(hashes: readonly bigint[]): void {
    for (const h of hashes) {
      this.blocks++;
      const lo = lo32(h);
      const hi = hi32();
      if (this.seen.find(lo, hi) >= 0) this.seenBefore++;
      else if (this.seen.count < SHARING_MAX_HASHES) this.seen.insert(lo, hi);
      else this.saturated = true;
    }
  }

  get share(): number {
    return this.blocks === 0 ? 0 : this.seenBefore / this.blocks;
  }
}

export interface ReuseProbeLike {
  gpuHit: number;
  evictedDistances: readonly number[];
}

export class ReuseStats {
  promptBlocks = 0;
  /** Leading blocks found on the chosen engine's GPU at dispatch. */
  gpuHitBlocks = 0;
  /** Blocks right after the GPU hit that the engine had evicted (any distance within the horizon). */
  evictedReuseBlocks = 0;
  /** Requests that found at least one evicted block right after their GPU hit. */
  requestsWithEvictedReuse = 0;
  requests = 0;
  /** Per CPU_TIERS entry: extra leading blocks a tier of that size would have served. */
  readonly tierBlocks: number[] = CPU_TIERS.map(() => 0);
  /** Per DISTANCE_EDGES bucket (+1 for ≥ the last edge): evicted-reused blocks by distance. */
  readonly distanceHist: number[] = new Array(DISTANCE_EDGES.length + 1).fill(0);

  constructor(readonly gpuBlocks: number) {}

  add(p: ReuseProbeLike, promptBlocks: number): void {
    this.requests++;
    this.promptBlocks += promptBlocks;
    this.gpuHitBlocks += p.gpuHit;
    const d = p.evictedDistances;
    if (d.length === 0) return;
    this.requestsWithEvictedReuse++;
    this.evictedReuseBlocks += d.length;
    for (const x of d) {
      const rel = x / this.gpuBlocks;
      let b = 0;
      while (b < DISTANCE_EDGES.length && rel >= DISTANCE_EDGES[b]!) b++;
      this.distanceHist[b]!++;
    }
    CPU_TIERS.forEach((t, k) => {
      const cap = t * this.gpuBlocks;
      let n = 0;
      while (n < d.length && d[n]! < cap) n++;
      this.tierBlocks[k]! += n;
    });
  }

  toJSON(): Record<string, unknown> {
    const pb = this.promptBlocks || 1;
    return {
      gpu_blocks_per_engine: this.gpuBlocks,
      prompt_blocks: this.promptBlocks,
      gpu_hit_share: this.gpuHitBlocks / pb,
      evicted_reuse_share: this.evictedReuseBlocks / pb,
      requests_with_evicted_reuse: this.requestsWithEvictedReuse,
      cpu_tier: CPU_TIERS.map((t, k) => ({ capacity_x_gpu: t, extra_hit_share: this.tierBlocks[k]! / pb })),
      eviction_distance_hist: this.distanceHist.map((n, b) => ({
        from_x_gpu: b === 0 ? 0 : DISTANCE_EDGES[b - 1]!, to_x_gpu: DISTANCE_EDGES[b] ?? null, blocks: n,
      })),
    };
  }
}
