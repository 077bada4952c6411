// All workers' KV event streams feeding one index. The daemon adds a worker when its engine
// starts (or an external engine is configured) and removes it when the worker goes away: removal
// drops the worker from the index at once, so no policy routes on blocks of a vanished engine.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { ThreadMemorySource } from "../core/thread-memory.ts";
import type { KvIndex } from "./indexer.ts";
import { CapacityBudget } from "./capacity-budget.ts";
import { KvEventStream, type KvEventSource, type KvReplayer, type KvStreamStatus } from "./ingest.ts";
import type { IngestThreadFigures } from "./threaded-ingest.ts";
import { ZmtpKvReplayer, ZmtpKvSource } from "./zmtp-source.ts";

// Capacity hints: a worker added with its engine's KV capacity gets its engine-hash map sized for
// it, and the shared index is sized for the sum over live workers (distinct blocks cannot exceed
// it on GPU), so a fresh index ingests at the reserved rate instead of paying for growth. The
// sum of all workers' reservations is capped at MAX_RESERVED_BLOCKS (a worker beyond the budget
// gets what is left, possibly nothing, and grows as before). Reserving costs ~33 B per block per
// table (20-byte slots at 60 % load, u64-table.ts RESERVE_LOAD; index slots grow by 12 B per 32
// workers), allocated lazily.

export interface AddWorkerOptions {
  blockSize?: number;
  replayTimeoutMs?: number;
  maxPendingBatches?: number;
  /** The engine's KV capacity in blocks, when known; see KvStreamOptions.capacityBlocks. */
  capacityBlocks?: number;
}

/** A worker's ZMTP endpoints: the ingest opens the SUB (and replay DEALER) itself, on whichever thread runs the stream. */
export interface ZmtpFeed {
  endpoint: string;
  topic: string;
  /** "" = no replay socket: gaps resync. */
  replayEndpoint: string;
  seed: number;
  replayTimeoutMs: number;
}

/** What callers read of one worker's stream (KvEventStream on the main thread; a snapshot's view with threads). */
export interface IngestStreamHandle {
  status(): KvStreamStatus;
  readonly reservedBlocks: number;
  readonly selfSized: boolean;
}

/**
 * All workers' streams over one index: KvIngest here (on the calling thread), or ThreadedKvIngest
 * (threaded-ingest.ts: streams on worker threads, index ops applied here). One conformance suite
 * runs over both (test/kv/ingest-modes.test.ts).
 */
export interface KvIngestApi {
  readonly index: KvIndex;
  addWorker(worker: string, source: KvEventSource, replayer: KvReplayer | null, opts?: AddWorkerOptions): unknown;
  addZmtpWorker(worker: string, feed: ZmtpFeed, opts?: AddWorkerOptions): void;
  removeWorker(worker: string): void;
  setCapacity(worker: string, blocks: number): void;
  reservedBlocks(): number;
  stream(worker: string): IngestStreamHandle | undefined;
  status(): KvStreamStatus[];
  /** Resolves when everything received so far is in the index and statuses are current. */
  sync(): Promise<void>;
  /** Ingest threads for GET /admin/debug/memory (none on the calling thread). */
  threads(): ThreadMemorySource[];
  /** Per ingest thread: stalls, restarts (for /metrics; none on the calling thread). */
  threadFigures(): IngestThreadFigures[];
  close(): void;
}

interface Entry {
  stream: KvEventStream;
  source: KvEventSource;
  replayer: KvReplayer | null;
  /** Blocks reserved for this worker (its clamped hint, within the budget). */
  reserved: number;
  /** Whether `reserved` is the engine's stated capacity (a hint or setCapacity), not an estimate from its first eviction. */
  stated: boolean;
}

export class KvIngest implements KvIngestApi {
  private entries = new Map<string, Entry>();
  /** Budget of all workers' reservations together (tests lower it). */
  private readonly budget: CapacityBudget;

  constructor(
    readonly index: KvIndex,
    private readonly clock: Clock,
    private readonly logger?: Logger,
    opts: { maxReservedBlocks?: number } = {},
  ) {
    this.budget = new CapacityBudget(index, () => this.entries.values(), opts.maxReservedBlocks);
  }

  /** Start consuming a worker's events. Replaces (and clears) an existing stream of that worker. */
  addWorker(worker: string, source: KvEventSource, replayer: KvReplayer | null, opts: AddWorkerOptions = {}): KvEventStream {
    if (this.entries.has(worker)) this.removeWorker(worker);
    const { capacityBlocks, ...rest } = opts;
    const reserved = this.budget.grant(capacityBlocks);
    let entry: Entry | null = null;
    const stream = new KvEventStream(worker, this.index, {
      clock: this.clock,
      replayer,
      ...rest,
      capacityBlocks: reserved,
      onCleared: () => this.budget.resizeIndex(),
      selfSize: (held) => (entry ? this.selfSize(entry, held) : 0),
      ...(this.logger ? { logger: this.logger.child("kv") } : {}),
    });
    entry = { stream, source, replayer, reserved, stated: reserved > 0 };
    this.entries.set(worker, entry);
    this.budget.resizeIndex();
    source.start(stream);
    return stream;
  }

  /** addWorker over ZMTP sockets opened here. */
  addZmtpWorker(worker: string, feed: ZmtpFeed, opts: AddWorkerOptions = {}): void {
    const log = this.logger?.child(worker);
    const base = { ...(log ? { log } : {}), clock: this.clock, seed: feed.seed };
    const source = new ZmtpKvSource(feed.endpoint, feed.topic, base);
    const replayer = feed.replayEndpoint ? new ZmtpKvReplayer(feed.replayEndpoint, { ...base, timeoutMs: feed.replayTimeoutMs }) : null;
    this.addWorker(worker, source, replayer, opts);
  }

  /** Everything is applied as it arrives here. */
  sync(): Promise<void> {
    return Promise.resolve();
  }

  threads(): ThreadMemorySource[] {
    return [];
  }

  threadFigures(): IngestThreadFigures[] {
    return [];
  }

  /** Blocks reserved over all live workers (≤ MAX_RESERVED_BLOCKS): what the index is sized for. */
  reservedBlocks(): number {
    return this.budget.total();
  }

  /** A capacity learned while the worker runs: CapacityBudget.stated. */
  setCapacity(worker: string, blocks: number): void {
    const e = this.entries.get(worker);
    const n = e ? this.budget.stated(e, blocks) : 0;
    if (n === 0) return;
    e!.stream.reserveCapacity(n);
    this.budget.resizeIndex();
  }

  /** No capacity known, first eviction: budget the estimate and size the index for it (ingest.ts selfSize). */
  private selfSize(e: Entry, held: number): number {
    if (e.reserved > 0 || this.entries.get(e.stream.worker) !== e) return 0;
    e.reserved = this.budget.grant(held);
    // Called between events (WorkerBlockMap.removedFrom, after its loop): no index slot is held.
    this.budget.resizeIndex();
    return e.reserved; // the stream sizes its own map for it
  }

  /** Stop consuming and forget the worker's blocks immediately. */
  removeWorker(worker: string): void {
    const e = this.entries.get(worker);
    this.entries.delete(worker);
    if (e) {
      e.stream.close();
      try {
        e.source.close();
        e.replayer?.close?.();
      } catch (err) {
        this.logger?.warn("closing kv event source failed", { worker, error: err instanceof Error ? err.message : String(err) });
      }
    }
    this.index.removeWorker(worker);
    this.budget.resizeIndex(); // removal may have shrunk the index below the others' capacity
  }

  stream(worker: string): KvEventStream | undefined {
    return this.entries.get(worker)?.stream;
  }

  /** Per-worker stream state for GET /admin/cluster. */
  status(): KvStreamStatus[] {
    return [...this.entries.values()].map((e) => e.stream.status());
  }

  close(): void {
    for (const w of [...this.entries.keys()]) this.removeWorker(w);
  }
}
