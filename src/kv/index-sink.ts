// Where one worker's index events go. WorkerBlockMap (worker-blocks.ts) turns engine events into
// herd-hash stores, removals and clears; a WorkerIndexSink takes them. On the main thread the sink is
// an IndexApplier over the shared index; on an ingest thread (ingest-thread.ts) it is an op
// recorder whose records the main thread hands to the same IndexApplier (op-stream.ts), so both
// modes apply the same calls in the same order.
//
// The applier, not the map, keeps the "extra holders" refcount: a herd hash the worker already
// holds on a medium under another engine hash (cache_salt, multimodal inputs) stays in the index
// until every engine hash naming it is removed. Whether it was already held is the index's answer
// (BlockIndex.applyPairs' `unchanged`), which only the index's own thread can give.
import { BlockIndex } from "./block-index.ts";
import type { KvIndex, Medium } from "./indexer.ts";
import { MEDIUM_INDEX } from "./indexer.ts";
import { join64 } from "./u64-table.ts";

/** One worker's index events as u32 pairs (`pairs[2i]` low, `pairs[2i + 1]` high; the first `n`, valid only during the call). */
export interface WorkerIndexSink {
  stored(medium: Medium, pairs: Uint32Array, n: number): void;
  removed(medium: Medium, pairs: Uint32Array, n: number): void;
  cleared(): void;
}

/** What the applier counts (WorkerBlockCounters' share that depends on the index). */
export interface AppliedCounters {
  /** Blocks newly recorded as held (after dedup). */
  blocksStored: number;
  blocksRemoved: number;
}

export class IndexApplier implements WorkerIndexSink {
  private extra: [Map<bigint, number>, Map<bigint, number>, Map<bigint, number>] = [new Map(), new Map(), new Map()];
  private kept = new Uint32Array(64);

  constructor(
    readonly worker: string,
    private readonly index: KvIndex,
    readonly counters: AppliedCounters = { blocksStored: 0, blocksRemoved: 0 },
  ) {}

  stored(medium: Medium, pairs: Uint32Array, n: number): void {
    if (n === 0) return;
    this.already = 0;
    this.creditExtra = this.extra[MEDIUM_INDEX[medium]]!;
    this.creditPairs = pairs;
    this.indexPairs("stored", medium, pairs, n, this.unchanged);
    this.counters.blocksStored += n - this.already;
  }

  removed(medium: Medium, pairs: Uint32Array, n: number): void {
    if (n === 0) return;
    const extra = this.extra[MEDIUM_INDEX[medium]]!;
    if (extra.size === 0) {
      // the common case: one engine hash per block
      this.counters.blocksRemoved += n;
      return this.indexPairs("removed", medium, pairs, n);
    }
    if (this.kept.length < 2 * n) this.kept = new Uint32Array(2 * n);
    const out = this.kept;
    let m = 0;
    for (let i = 0; i < n; i++) {
      const lo = pairs[2 * i]!;
      const hi = pairs[2 * i + 1]!;
      const h = join64(lo, hi);
      const c = extra.get(h);
      if (c !== undefined) {
        // another engine hash still names it on this medium
        if (c <= 1) extra.delete(h);
        else extra.set(h, c - 1);
        continue;
      }
      out[2 * m] = lo;
      out[2 * m + 1] = hi;
      m++;
    }
    this.counters.blocksRemoved += m;
    if (m > 0) this.indexPairs("removed", medium, out, m);
  }

  cleared(): void {
    this.index.clearWorker(this.worker);
    for (const e of this.extra) e.clear();
  }

  // stored()'s callback state (one bound callback, not a closure per store).
  private already = 0;
  private creditExtra: Map<bigint, number> = this.extra[0];
  private creditPairs: Uint32Array = new Uint32Array(0);
  private readonly unchanged = (k: number): void => {
    this.already++;
    const h = join64(this.creditPairs[2 * k]!, this.creditPairs[2 * k + 1]!);
    this.creditExtra.set(h, (this.creditExtra.get(h) ?? 0) + 1);
  };

  /** Hand u32-pair hashes to the index: allocation-free for BlockIndex, bigint[] for any other. */
  private indexPairs(kind: "stored" | "removed", medium: Medium, pairs: Uint32Array, n: number, unchanged?: (i: number) => void): void {
    if (this.index instanceof BlockIndex) return this.index.applyPairs(this.worker, kind, medium, pairs, n, unchanged);
    const hashes = new Array<bigint>(n);
    for (let i = 0; i < n; i++) hashes[i] = join64(pairs[2 * i]!, pairs[2 * i + 1]!);
    this.index.apply(this.worker, { kind, medium, hashes }, unchanged);
  }
}
