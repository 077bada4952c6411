// The daemon's side of KV events: for every worker with KV endpoints, a ZMTP SUB on its publisher
// and a DEALER on its replay socket, feeding KvIngest (per-worker stream state) and through it
// the one shared block index. Worker lifecycle comes from the supervisor: a worker that fails or
// stops leaves the index at once; an engine process that restarted starts a fresh stream (its
// cache is gone, and its sequence numbers start again from 0).
//
// Bounds: the sockets' own (zmtp-source.ts); KvEventStream caps the batches held while a gap is
// repaired; with ingest threads, ThreadedKvIngest bounds the ops in flight (threaded-ingest.ts).
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Worker } from "../workers/worker.ts";
import { BlockIndex } from "./block-index.ts";
import type { KvIndex, Overlap } from "./indexer.ts";
import { KvIngest, type KvIngestApi } from "./ingest-manager.ts";
import type { KvEventSource, KvReplayer, KvStreamStatus } from "./ingest.ts";
import { ThreadedKvIngest, type ThreadedIngestOptions } from "./threaded-ingest.ts";

export { ZmtpKvReplayer, ZmtpKvSource, type ReplayerOptions, type ZmtpConnectOptions } from "./zmtp-source.ts";

/** Where one worker publishes (connect side) and how its blocks are hashed. */
export interface KvWorkerSpec {
  id: string;
  model: string;
  /** The model's KV block size (config models[].block_size). */
  blockSize: number;
  endpoint: string;
  /** "" = the engine has no replay socket: gaps resync instead. */
  replayEndpoint: string;
  /** "" = subscribe to everything on the endpoint. */
  topic: string;
  /**
   * The engine's KV capacity in blocks when known (sim --kv-blocks, vLLM num_gpu_blocks): sizes the
   * worker's map and the shared index up front (capped; see ingest-manager.ts). A hint only: a
   * change does not restart the stream.
   */
  kvBlocks?: number;
}

/** A worker's event stream as /admin/cluster shows it. */
export interface KvStreamView {
  endpoint: string;
  replay_endpoint: string | null;
  topic: string;
  connected: boolean;
  last_seq: string | null;
  batches: number;
  events: number;
  gaps: number;
  replays: number;
  replay_failures: number;
  resyncs: number;
  restarts: number;
  duplicates: number;
  pending_batches: number;
  decode_errors: number;
  skipped: number;
  /** Engine blocks this worker currently has in the index. */
  blocks: number;
  /** Engine restarts seen through the supervisor (each starts a fresh stream). */
  reattached: number;
}

export interface KvConsumerOptions {
  clock: Clock;
  log: Logger;
  index?: KvIndex;
  replayTimeoutMs?: number;
  maxPendingBatches?: number;
  /** Socket factory (tests inject fakes; with threads their messages are relayed); default ZMTP SUB + DEALER. */
  connect?: (spec: KvWorkerSpec) => { source: KvEventSource; replayer: KvReplayer | null };
  /**
   * Ingest threads (router.kv_events.ingest_threads): 0 = streams on this thread (KvIngest); N > 0 =
   * ThreadedKvIngest with N threads owning the sockets, decoding and engine-hash maps.
   */
  ingestThreads?: number;
  threaded?: Omit<ThreadedIngestOptions, "threads">;
}

interface Tracked {
  spec: KvWorkerSpec;
  attached: boolean;
  state: Worker["state"] | null;
  restarts: number;
  reattached: number;
  /** Attached since the worker was last ready (nothing of a previous engine process can be in it). */
  fresh: boolean;
}

export class KvConsumer {
  readonly index: KvIndex;
  readonly ingest: KvIngestApi;
  private readonly workers = new Map<string, Tracked>();
  private readonly log: Logger;
  private seed = 1;

  constructor(private readonly o: KvConsumerOptions) {
    this.index = o.index ?? new BlockIndex();
    this.log = o.log.child("kv");
    const threads = o.ingestThreads ?? 0;
    this.ingest = threads > 0 ? new ThreadedKvIngest(this.index, this.log, { ...o.threaded, threads }) : new KvIngest(this.index, o.clock, this.log);
  }

  /** Start consuming a worker's events (idempotent for the same spec; a changed spec restarts). */
  add(spec: KvWorkerSpec): void {
    const t = this.workers.get(spec.id);
    if (t && t.attached && sameSpec(t.spec, spec)) return;
    if (t) {
      t.spec = spec;
      this.attach(t);
    } else {
      const n: Tracked = { spec, attached: false, state: null, restarts: 0, reattached: 0, fresh: true };
      this.workers.set(spec.id, n);
      this.attach(n);
    }
  }

  /** Stop consuming and drop the worker's blocks at once; forget it unless `keep`. */
  remove(id: string, keep = false): void {
    const t = this.workers.get(id);
    if (!t) return;
    if (t.attached) this.ingest.removeWorker(id);
    else this.index.removeWorker(id);
    t.attached = false;
    if (!keep) this.workers.delete(id);
  }

  /**
   * Follow the supervisor's view of a worker: failed/stopped → out of the index now; an engine
   * process that died or was restarted → a fresh stream (its cache is gone); otherwise attached.
   */
  observe(w: Readonly<Worker>): void {
    const t = this.workers.get(w.id);
    if (!t) return;
    const prev = t.state;
    t.state = w.state;
    const restarted = w.restarts !== t.restarts;
    t.restarts = w.restarts;
    if (w.state === "failed" || w.state === "stopped") {
      if (t.attached) this.log.info("worker gone; removed from the kv index", { worker: w.id, state: w.state });
      this.remove(w.id, true);
      return;
    }
    const died = w.state === "starting" && (prev === "ready" || prev === "draining");
    // One crash can show up twice (the engine leaves `ready`, later the restart count moves): a
    // stream started since the worker was last ready is already fresh.
    if (t.attached && (restarted || died) && !t.fresh) {
      this.log.info("engine restarted; fresh kv event stream", { worker: w.id, restarts: w.restarts });
      t.reattached++;
      this.attach(t);
    } else if (!t.attached) this.attach(t);
    if (w.state === "ready") t.fresh = false;
  }

  private attach(t: Tracked): void {
    const { spec } = t;
    const opts = {
      blockSize: spec.blockSize,
      ...(spec.kvBlocks !== undefined ? { capacityBlocks: spec.kvBlocks } : {}),
      ...(this.o.replayTimeoutMs !== undefined ? { replayTimeoutMs: this.o.replayTimeoutMs } : {}),
      ...(this.o.maxPendingBatches !== undefined ? { maxPendingBatches: this.o.maxPendingBatches } : {}),
    };
    // addWorker replaces (and clears) an existing stream of the worker.
    if (this.o.connect) {
      const { source, replayer } = this.o.connect(spec);
      this.ingest.addWorker(spec.id, source, replayer, opts);
    } else {
      const feed = { endpoint: spec.endpoint, topic: spec.topic, replayEndpoint: spec.replayEndpoint, seed: this.seed++, replayTimeoutMs: this.o.replayTimeoutMs ?? 2000 };
      this.ingest.addZmtpWorker(spec.id, feed, opts);
    }
    t.attached = true;
    t.fresh = true;
  }

  /** Leading blocks of `hashes` each worker holds, per medium. */
  overlaps(hashes: readonly bigint[]): Map<string, Overlap> {
    return hashes.length === 0 ? new Map() : this.index.findMatches(hashes);
  }

  spec(id: string): KvWorkerSpec | null {
    return this.workers.get(id)?.spec ?? null;
  }

  status(id: string): KvStreamView | null {
    const t = this.workers.get(id);
    if (!t) return null;
    const s: KvStreamStatus | undefined = t.attached ? this.ingest.stream(id)?.status() : undefined;
    return {
      endpoint: t.spec.endpoint,
      replay_endpoint: t.spec.replayEndpoint || null,
      topic: t.spec.topic,
      connected: s?.connected ?? false,
      last_seq: s?.lastSeq ?? null,
      batches: s?.batchesApplied ?? 0,
      events: s?.eventsApplied ?? 0,
      gaps: s?.gaps ?? 0,
      replays: s?.replays ?? 0,
      replay_failures: s?.replayFailures ?? 0,
      resyncs: s?.resyncs ?? 0,
      restarts: s?.restarts ?? 0,
      duplicates: s?.duplicates ?? 0,
      pending_batches: s?.pendingBatches ?? 0,
      decode_errors: s?.decodeErrors ?? 0,
      skipped: (s?.unknownSkipped ?? 0) + (s?.invalidEvents ?? 0),
      blocks: s?.mappedBlocks ?? 0,
      reattached: t.reattached,
    };
  }

  close(): void {
    this.ingest.close();
    this.workers.clear();
  }
}

function sameSpec(a: KvWorkerSpec, b: KvWorkerSpec): boolean {
  return a.endpoint === b.endpoint && a.replayEndpoint === b.replayEndpoint && a.topic === b.topic && a.blockSize === b.blockSize && a.model === b.model;
}
