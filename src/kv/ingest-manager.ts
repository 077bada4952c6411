// All workers' KV event streams feeding one index. The daemon adds a worker when its engine
// starts (or an external engine is configured) and removes it when the worker goes away: removal
// drops the worker from the index at once, so no policy routes on blocks of a vanished engine.
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { KvIndex } from "./indexer.ts";
import { KvEventStream, type KvEventSource, type KvReplayer, type KvStreamStatus } from "./ingest.ts";

export interface AddWorkerOptions {
  blockSize?: number;
  replayTimeoutMs?: number;
  maxPendingBatches?: number;
}

interface Entry {
  stream: KvEventStream;
  source: KvEventSource;
  replayer: KvReplayer | null;
}

export class KvIngest {
  private entries = new Map<string, Entry>();

  constructor(
    readonly index: KvIndex,
    private readonly clock: Clock,
    private readonly logger?: Logger,
  ) {}

  /** Start consuming a worker's events. Replaces (and clears) an existing stream of that worker. */
  addWorker(worker: string, source: KvEventSource, replayer: KvReplayer | null, opts: AddWorkerOptions = {}): KvEventStream {
    if (this.entries.has(worker)) this.removeWorker(worker);
    const stream = new KvEventStream(worker, this.index, {
      clock: this.clock,
      replayer,
      ...opts,
      ...(this.logger ? { logger: this.logger.child("kv") } : {}),
    });
    this.entries.set(worker, { stream, source, replayer });
    source.start(stream);
    return stream;
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
