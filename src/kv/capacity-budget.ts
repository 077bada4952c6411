// The index's capacity budget, shared by both ingest modes (ingest-manager.ts on the event loop,
// threaded-ingest.ts with streams on threads): each worker's reservation (stated capacity, learned
// from /metrics, or self-sized at its first eviction) is granted within one cap over all workers,
// MAX_RESERVED_BLOCKS, and the shared index is sized for their sum.
import type { KvIndex } from "./indexer.ts";
import { clampCapacity, MAX_RESERVED_BLOCKS } from "./ingest.ts";

/** What the budget reads of a worker's entry. */
export interface Reservation {
  reserved: number;
  /** A capacity was stated (up front or learned once): later statements are ignored. */
  stated?: boolean;
}

/** The index's optional pre-sizing (BlockIndex has it; other KvIndex implementations may not). */
type Reservable = KvIndex & { reserve?(blocks: number): void };

export class CapacityBudget {
  private readonly maxReserved: number;

  constructor(
    private readonly index: KvIndex,
    private readonly entries: () => Iterable<Reservation>,
    maxReservedBlocks: number | undefined,
  ) {
    this.maxReserved = Math.min(maxReservedBlocks ?? MAX_RESERVED_BLOCKS, MAX_RESERVED_BLOCKS);
  }

  /** Blocks reserved over all live workers (≤ the cap): what the index is sized for. */
  total(): number {
    let sum = 0;
    for (const e of this.entries()) sum += e.reserved;
    return sum;
  }

  /** Blocks `wanted` may have within the cap, counting `own` (the worker's current reservation) as free. */
  grant(wanted: number | undefined, own = 0): number {
    return Math.min(clampCapacity(wanted), Math.max(0, this.maxReserved - this.total() + own));
  }

  /**
   * A worker's KV capacity learned while it runs (vLLM's num_gpu_blocks, SGLang's pages, from
   * /metrics when no flag gave it up front): reserve for it once, within the cap. It replaces an
   * estimate from the first eviction when larger. Returns the new reservation when it grew (the
   * caller sizes the worker's stream for it, then the index), else 0.
   */
  stated(e: Reservation, blocks: number): number {
    if (e.stated) return 0;
    const n = this.grant(blocks, e.reserved);
    if (n === 0) return 0; // budget spent: a later scrape may find room
    e.stated = true;
    if (n <= e.reserved) return 0;
    e.reserved = n;
    return n;
  }

  /** Size the shared index for the live workers' capacity (again after a clear or a removal shrank it). */
  resizeIndex(): void {
    const sum = this.total();
    const index = this.index as Reservable;
    if (sum > 0 && typeof index.reserve === "function") index.reserve(sum);
  }
}
