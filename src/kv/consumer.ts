// The daemon's side of KV events: for every worker with KV endpoints, a ZMTP SUB on its publisher
// and a DEALER on its replay socket, feeding KvIngest (per-worker stream state) and through it
// the one shared block index. Worker lifecycle comes from the supervisor: a worker that fails or
// stops leaves the index at once; an engine process that restarted starts a fresh stream (its
// cache is gone, and its sequence numbers start again from 0).
//
// Bounds: SUB delivery is by callback (no receive queue; TCP backpressure while we apply), one
// replay in flight per worker, replies capped in batches and bytes, KvEventStream caps the
// batches held while a gap is repaired.
import { type Clock, RealClock, type TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { SeededRng } from "../core/rng.ts";
import type { Worker } from "../cluster/workers.ts";
import { parseReplayMessage, replayRequest } from "../protocol/kv-frames.ts";
import { DealerSocket, SubSocket } from "../transport/zmtp/index.ts";
import { BlockIndex } from "./block-index.ts";
import type { KvIndex, Overlap } from "./indexer.ts";
import { KvIngest } from "./ingest-manager.ts";
import type { KvEventSink, KvEventSource, KvReplayer, KvStreamStatus, ReplayBatch } from "./ingest.ts";

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
}

export interface ZmtpConnectOptions {
  log?: Logger;
  clock?: Clock;
  seed?: number;
  /** Reconnect backoff cap; engines restart in seconds, so keep it short. Default 1000 ms. */
  reconnectIvlMaxMs?: number;
}

/** A worker's live events: SUB connected to its publisher, subscribed to its topic. */
export class ZmtpKvSource implements KvEventSource {
  private sub: SubSocket | null = null;
  /** Messages whose application threw (logged for the first few only). */
  errors = 0;

  constructor(
    private readonly endpoint: string,
    private readonly topic: string,
    private readonly o: ZmtpConnectOptions = {},
  ) {}

  start(sink: KvEventSink): void {
    const sub = new SubSocket({
      ...(this.o.log ? { log: this.o.log } : {}),
      ...(this.o.clock ? { clock: this.o.clock } : {}),
      rng: new SeededRng(this.o.seed ?? 1),
      reconnectIvlMaxMs: this.o.reconnectIvlMaxMs ?? 1000,
      onMessage: (frames) => {
        // A bug in applying one batch must not take the socket (or the daemon) down with it.
        try {
          sink.message(frames);
        } catch (e) {
          this.errors++;
          if (this.errors <= 10) this.o.log?.error("kv event message could not be applied", { endpoint: this.endpoint, error: errorMessage(e) });
        }
      },
      onEvent: (e) => {
        if (e.type === "ready") sink.connection(true);
        else if (e.type === "disconnected" || e.type === "protocol_error") sink.connection(false);
      },
    });
    sub.subscribe(this.topic);
    sub.connect(this.endpoint);
    this.sub = sub;
  }

  close(): void {
    this.sub?.close();
    this.sub = null;
  }
}

export interface ReplayerOptions extends ZmtpConnectOptions {
  /** Give up on a replay after this long (KvEventStream has its own bound too). Default 2000 ms. */
  timeoutMs?: number;
  /** Most batches accepted in one reply (vLLM's default buffer is 10000). Default 20000. */
  maxBatches?: number;
  /** Most payload bytes accepted in one reply. Default 256 MiB. */
  maxBytes?: number;
}

interface Pending {
  batches: ReplayBatch[];
  bytes: number;
  resolve(b: ReplayBatch[]): void;
  reject(e: Error): void;
  timer: TimerHandle | null;
}

/**
 * A worker's replay socket: DEALER, one request at a time, `[b"", u64be(start)]`, both reply
 * layouts, until the end marker. After a failed or timed-out request the DEALER is replaced, so
 * a late reply to the old request can never be mistaken for the answer to a new one.
 */
export class ZmtpKvReplayer implements KvReplayer {
  private dealer: DealerSocket | null = null;
  private pending: Pending | null = null;
  private queue: (() => void)[] = [];
  private closed = false;
  private readonly timeoutMs: number;
  private readonly maxBatches: number;
  private readonly maxBytes: number;
  private generation = 0;

  constructor(
    private readonly endpoint: string,
    private readonly o: ReplayerOptions = {},
  ) {
    this.timeoutMs = o.timeoutMs ?? 2000;
    this.maxBatches = o.maxBatches ?? 20_000;
    this.maxBytes = o.maxBytes ?? 256 * 2 ** 20;
  }

  private socket(): DealerSocket {
    if (this.dealer) return this.dealer;
    const gen = ++this.generation;
    const d = new DealerSocket({
      ...(this.o.log ? { log: this.o.log } : {}),
      ...(this.o.clock ? { clock: this.o.clock } : {}),
      rng: new SeededRng((this.o.seed ?? 1) + gen),
      reconnectIvlMaxMs: this.o.reconnectIvlMaxMs ?? 1000,
      // One request is in flight at a time; a bounded outbox is plenty.
      sndHwm: 16,
      onMessage: (frames) => this.onReply(frames),
    });
    d.connect(this.endpoint);
    this.dealer = d;
    return d;
  }

  replay(startSeq: bigint): Promise<ReplayBatch[]> {
    if (this.closed) return Promise.reject(new Error("replayer closed"));
    return new Promise<ReplayBatch[]>((resolve, reject) => {
      const run = () => this.send(startSeq, resolve, reject);
      if (this.pending) {
        // One in flight; the stream never asks twice at once, so this queue stays tiny. Bound it anyway.
        if (this.queue.length >= 4) return reject(new Error("too many replay requests queued"));
        this.queue.push(run);
      } else run();
    });
  }

  private send(startSeq: bigint, resolve: (b: ReplayBatch[]) => void, reject: (e: Error) => void): void {
    if (this.closed) return reject(new Error("replayer closed"));
    const p: Pending = { batches: [], bytes: 0, resolve, reject, timer: null };
    this.pending = p;
    const clock = this.o.clock ?? new RealClock();
    p.timer = clock.setTimer(this.timeoutMs, () => this.finish(p, new Error(`no replay reply within ${this.timeoutMs} ms`)));
    if (!this.socket().send(replayRequest(startSeq))) this.finish(p, new Error("replay request not queued (send queue full)"));
  }

  private onReply(frames: Uint8Array[]): void {
    const p = this.pending;
    if (!p) return; // nothing asked: a stray reply
    let m;
    try {
      m = parseReplayMessage(frames);
    } catch (e) {
      return this.finish(p, new Error(`bad replay reply: ${errorMessage(e)}`));
    }
    if (m.kind === "end") return this.finish(p, null);
    p.batches.push({ seq: m.seq, payload: m.payload });
    p.bytes += m.payload.length;
    if (p.batches.length > this.maxBatches || p.bytes > this.maxBytes) {
      this.finish(p, new Error(`replay reply exceeds ${this.maxBatches} batches or ${this.maxBytes} bytes`));
    }
  }

  private finish(p: Pending, err: Error | null): void {
    if (this.pending !== p) return;
    this.pending = null;
    p.timer?.cancel();
    if (err) {
      // The rest of that reply may still arrive: a fresh socket will not see it.
      this.dealer?.close();
      this.dealer = null;
      p.reject(err);
    } else p.resolve(p.batches);
    const next = this.queue.shift();
    if (next) next();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    const p = this.pending;
    if (p) this.finish(p, new Error("replayer closed"));
    for (const q of this.queue.splice(0)) q();
    this.dealer?.close();
    this.dealer = null;
  }
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
  /** Socket factory (tests inject fakes); default ZMTP SUB + DEALER. */
  connect?: (spec: KvWorkerSpec) => { source: KvEventSource; replayer: KvReplayer | null };
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
  readonly ingest: KvIngest;
  private readonly workers = new Map<string, Tracked>();
  private readonly log: Logger;
  private seed = 1;

  constructor(private readonly o: KvConsumerOptions) {
    this.index = o.index ?? new BlockIndex();
    this.log = o.log.child("kv");
    this.ingest = new KvIngest(this.index, o.clock, this.log);
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
    const { source, replayer } = this.o.connect ? this.o.connect(spec) : this.zmtp(spec);
    // addWorker replaces (and clears) an existing stream of the worker.
    this.ingest.addWorker(spec.id, source, replayer, {
      blockSize: spec.blockSize,
      ...(this.o.replayTimeoutMs !== undefined ? { replayTimeoutMs: this.o.replayTimeoutMs } : {}),
      ...(this.o.maxPendingBatches !== undefined ? { maxPendingBatches: this.o.maxPendingBatches } : {}),
    });
    t.attached = true;
    t.fresh = true;
  }

  private zmtp(spec: KvWorkerSpec): { source: KvEventSource; replayer: KvReplayer | null } {
    const base = { log: this.log.child(spec.id), clock: this.o.clock, seed: this.seed++ };
    const timeoutMs = this.o.replayTimeoutMs ?? 2000;
    return {
      source: new ZmtpKvSource(spec.endpoint, spec.topic, base),
      replayer: spec.replayEndpoint ? new ZmtpKvReplayer(spec.replayEndpoint, { ...base, timeoutMs }) : null,
    };
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
