// The cluster-wide block index: which worker holds which prefix block, on which medium. One index
// is shared by every routing policy; engine event streams (ingest.ts), other herd nodes and the KV
// tier all feed it with events already expressed in herd's own block hashes (hash.ts).

export const MEDIA = ["gpu", "cpu", "disk"] as const;
export type Medium = (typeof MEDIA)[number];
export const MEDIUM_INDEX: Record<Medium, number> = { gpu: 0, cpu: 1, disk: 2 };

/** Leading prompt blocks a worker holds, counted separately per medium. */
export interface Overlap {
  gpu: number;
  cpu: number;
  disk: number;
}

export type IndexEvent =
  /** The worker now holds these blocks (sequence hashes) on `medium`. */
  | { kind: "stored"; medium: Medium; hashes: readonly bigint[] }
  /** The worker no longer holds these blocks on `medium`. No cascade to descendants. */
  | { kind: "removed"; medium: Medium; hashes: readonly bigint[] }
  /** The worker holds nothing any more (all media). */
  | { kind: "cleared" };

/**
 * Told what the index saw a worker lose: `removal` = blocks removed on `medium`, as u32 halves
 * (`pairs[2i]` low, `pairs[2i + 1]` high, the first `n`; valid only during the call), or null when
 * the worker was cleared or removed (it holds nothing). Called synchronously inside apply(): keep it
 * cheap, and never apply events from it.
 */
export type RemovalListener = (worker: string, removal: { medium: Medium; pairs: Uint32Array; n: number } | null) => void;

export interface IndexStats {
  /** Distinct block hashes held by at least one worker. */
  blocks: number;
  /** (worker, block, medium) residencies. */
  entries: number;
  workers: number;
  /** Bytes of the index's own storage (typed arrays), where the implementation knows it. */
  bytes: number | null;
}

export interface KvIndex {
  /**
   * Apply one event. `unchanged(i)` (optional) is called for each hashes[i] that changed nothing:
   * already held (stored) or not held (removed) by the worker on that medium.
   */
  apply(worker: string, event: IndexEvent, unchanged?: (i: number) => void): void;
  /**
   * For a prompt's block hashes (hash.ts blockHashes), the number of leading blocks each worker
   * holds, per medium: `gpu` = length of the longest prefix hashes[0..gpu) all held on GPU, and so
   * on for cpu and disk independently. Workers holding none of the first block are absent.
   */
  findMatches(hashes: readonly bigint[]): Map<string, Overlap>;
  /** Whether `worker` holds `hash` on `medium`. */
  holds(worker: string, hash: bigint, medium: Medium): boolean;
  /** Forget the worker entirely (it left the cluster). Takes effect at once. */
  removeWorker(worker: string): void;
  /** Drop every block of the worker but keep it known (resync, AllBlocksCleared). */
  clearWorker(worker: string): void;
  /**
   * Optional: subscribe to removals (the router drops its predicted blocks when the engine evicts
   * them). Returns the unsubscribe function.
   */
  onRemoved?(listener: RemovalListener): () => void;
  /** Distinct blocks indexed. */
  size(): number;
  stats(): IndexStats;
}
