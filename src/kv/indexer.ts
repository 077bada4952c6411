// The cluster-wide block index: which worker holds which prefix block, on which medium. One index
// is shared by every routing policy; engine event streams (ingest.ts), other herd nodes and the KV
// tier all feed it with events already expressed in herd's own block hashes (hash.ts).

export const MEDIA = ["gpu", "cpu", "disk"] as const;
export type Medium = (typeof MEDIA)[number];
export const MEDIUM_INDEX: Record<Medium, number> = { gpu: 0, cpu: 1, disk: 2 };

/**
 * The leading prompt blocks a worker can serve, by the medium each comes from, in tiers: `gpu` =
 * the longest prefix all held on GPU; `cpu` = the blocks after it, each on GPU or CPU, up to the
 * first one on neither (the CPU continuation of the GPU hit); `disk` = the blocks after those, each
 * on some medium. gpu + cpu + disk is the whole hit — what an engine with an offload tier serves
 * (its prefix-cache hit, then blocks loaded from the tier: vLLM's OffloadingConnector, herd's sim
 * engine/sim/scheduler.ts lookupTier). Counting each medium's run from block 0 on its own gave a
 * tier of evicted blocks (which rarely holds block 0: the hot prompt start stays on GPU) no credit
 * at all (issue 25).
 */
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
   * can serve, by medium in tiers (see Overlap): `gpu` = length of the longest prefix
   * hashes[0..gpu) all held on GPU, then `cpu` more on GPU or CPU, then `disk` more on any medium.
   * Workers holding none of the first block (on any medium) are absent.
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
