// KV event ingest on worker threads (router.kv_events.ingest_threads > 0): engine workers are
// spread over N ingest threads (ingest-thread.ts), each owning its workers' sockets, sequencing,
// decoding, hashing and engine-hash maps; this side applies the threads' index ops (op-stream.ts)
// to the one index the router reads, synchronously, so a match never crosses threads. Ops of one
// worker arrive and are applied in its event order (one message channel per thread).
//
// Kept from the single-threaded KvIngest (ingest-manager.ts): the capacity budget and index
// reservations, removal taking effect at once (ops of a removed stream are dropped on arrival:
// every addWorker gets a fresh stream id), status per worker (the thread sends the statuses that
// changed, at most every statusIntervalMs (100 ms), and on sync()). Bounds: a thread's posted-but-unapplied op words
// (maxInflightWords; the thread waits beyond it, ingest-thread.ts) and relayed messages in flight
// to a thread (maxRelayedMessages; beyond it a message is dropped and counted, and the stream
// sees a gap). A thread that dies is logged, replaced, and its workers' streams started afresh
// (their blocks cleared first: the engine-hash maps died with it); the daemon keeps running.
import { RealClock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { type ThreadMemorySource, ThreadMemoryAsker } from "../core/thread-memory.ts";
import { IndexApplier, type WorkerIndexSink } from "./index-sink.ts";
import type { KvIndex } from "./indexer.ts";
import { CapacityBudget } from "./capacity-budget.ts";
import { type KvEventSink, type KvEventSource, type KvReplayer, type KvStreamStatus } from "./ingest.ts";
import type { AddWorkerOptions, IngestStreamHandle, KvIngestApi, ZmtpFeed } from "./ingest-manager.ts";
import type { FromThread, ThreadFeed, ThreadStats, ToThread } from "./ingest-thread.ts";
import { applyOps } from "./op-stream.ts";

export interface ThreadedIngestOptions {
  threads: number;
  /** Op words a thread may have posted and not yet seen applied (default 4M words = 16 MiB). */
  maxInflightWords?: number;
  /** Relayed messages (injected sources) in flight to one thread (default 8192). */
  maxRelayedMessages?: number;
  maxReservedBlocks?: number;
  statusIntervalMs?: number;
}

/** One ingest thread's figures for /metrics (herd_kv_ingest_*). */
export interface IngestThreadFigures {
  thread: string;
  stalls: number;
  stallSeconds: number;
  restarts: number;
  relayDropped: number;
  blocksApplied: number;
  /** Op messages the thread sent (each one postMessage and one apply here). */
  flushes: number;
}

interface Slot {
  name: string;
  worker: Worker | null;
  credit: Int32Array;
  stats: ThreadStats;
  restarts: number;
  relayInflight: number;
  relayDropped: number;
  blocksApplied: number;
  mem: ThreadMemoryAsker;
  syncs: Map<number, () => void>;
  /** Which of threadUrls() this thread was started from, and whether it said `ready`. */
  urlAt: number;
  ready: boolean;
}

interface Entry {
  worker: string;
  id: number;
  slot: Slot;
  applier: IndexApplier;
  sink: WorkerIndexSink;
  status: KvStreamStatus | null;
  opts: AddWorkerOptions;
  feed: ThreadFeed;
  source: KvEventSource | null;
  replayer: KvReplayer | null;
  reserved: number;
  stated: boolean;
  selfSized: boolean;
}

/** Where ingest-thread.ts lives (a compiled binary embeds it as an extra entry point, as preprocess/pool.ts does its worker). */
function threadUrls(): string[] {
  const here = new URL("./ingest-thread.ts", import.meta.url).href;
  const m = /^(file:\/\/\/\$bunfs\/root\/)/.exec(import.meta.url);
  if (!m) return [here];
  return ["src/kv/ingest-thread.ts", "kv/ingest-thread.ts", "ingest-thread.ts"].map((p) => m[1] + p);
}

export class ThreadedKvIngest implements KvIngestApi {
  private readonly slots: Slot[] = [];
  private readonly entries = new Map<string, Entry>();
  private readonly byId = new Map<number, Entry>();
  private nextId = 1;
  private nextSync = 1;
  private closed = false;
  private readonly maxInflight: number;
  private readonly maxRelayed: number;
  private readonly budget: CapacityBudget;
  private readonly statusIntervalMs: number;
  /** Memory questions' deadlines and restart delays. */
  private readonly memClock = new RealClock({ unref: true });

  constructor(
    readonly index: KvIndex,
    private readonly logger: Logger | undefined,
    o: ThreadedIngestOptions,
  ) {
    this.maxInflight = o.maxInflightWords ?? 1 << 22;
    this.maxRelayed = o.maxRelayedMessages ?? 8192;
    this.budget = new CapacityBudget(index, () => this.entries.values(), o.maxReservedBlocks);
    this.statusIntervalMs = o.statusIntervalMs ?? 100;
    const n = Math.max(1, Math.min(16, Math.floor(o.threads)));
    for (let i = 0; i < n; i++) {
      const slot: Slot = {
        name: `kv-ingest-${i}`, worker: null, credit: new Int32Array(new SharedArrayBuffer(4)), stats: { stalls: 0, stallMs: 0, flushes: 0, blocks: 0 },
        restarts: 0, relayInflight: 0, relayDropped: 0, blocksApplied: 0, syncs: new Map(), urlAt: 0, ready: false,
        mem: ThreadMemoryAsker.overWorker(this.memClock, () => slot.worker, (id, gc) => ({ op: "memory", id, gc }) satisfies ToThread),
      };
      this.slots.push(slot);
      this.spawn(slot);
    }
  }

  private spawn(slot: Slot): void {
    const urls = threadUrls();
    const w = new Worker(urls[slot.urlAt]!);
    slot.worker = w;
    slot.ready = false;
    Atomics.store(slot.credit, 0, 0);
    w.onmessage = (ev: MessageEvent) => {
      if (slot.worker === w) this.onThread(slot, ev.data as FromThread);
    };
    w.onerror = (ev) => {
      if (slot.worker !== w) return;
      if (!slot.ready && slot.urlAt + 1 < urls.length) {
        // Not loadable from there (a compiled binary's layout): try the next place, as preprocess/pool.ts does.
        w.terminate();
        slot.urlAt++;
        this.spawn(slot);
        return this.restartStreams(slot);
      }
      this.died(slot, ev.message);
    };
    w.addEventListener("close", () => {
      if (slot.worker === w) this.died(slot, "exited");
    });
    this.post(slot, { op: "init", credit: slot.credit.buffer as SharedArrayBuffer, maxInflightWords: this.maxInflight, statusIntervalMs: this.statusIntervalMs });
  }

  /** The thread is gone: say so loudly, replace it, and start its workers' streams afresh. */
  private died(slot: Slot, message: string): void {
    slot.worker?.terminate();
    slot.worker = null;
    slot.mem.failAll();
    for (const done of slot.syncs.values()) done();
    slot.syncs.clear();
    if (this.closed) return;
    slot.restarts++;
    this.logger?.error("kv ingest thread died; restarting it and its workers' event streams", { thread: slot.name, error: message, restarts: slot.restarts });
    slot.relayInflight = 0;
    // At once the first time; a thread that keeps dying is restarted after 50 ms, 100 ms, … ≤ 5 s
    // (its streams are started afresh either way, so nothing is owed to the time between).
    const delayMs = slot.restarts <= 1 ? 0 : Math.min(5_000, 50 * 2 ** Math.min(slot.restarts - 2, 7));
    const restart = () => {
      if (this.closed || slot.worker) return;
      this.spawn(slot);
      this.restartStreams(slot);
    };
    if (delayMs === 0) restart();
    else this.memClock.setTimer(delayMs, restart);
  }

  /** Start every stream of the slot afresh on its (new) thread. */
  private restartStreams(slot: Slot): void {
    for (const e of [...this.entries.values()]) {
      if (e.slot !== slot) continue;
      // Its engine-hash map died with the thread: what the index holds for it can no longer be
      // removed by engine hash, so it goes, and the new stream replays from the engine.
      this.byId.delete(e.id);
      e.applier.cleared();
      e.id = this.nextId++;
      e.applier = new IndexApplier(e.worker, this.index);
      e.sink = this.sinkFor(e);
      e.status = null;
      this.byId.set(e.id, e);
      this.post(slot, { op: "add", stream: e.id, worker: e.worker, opts: this.threadOpts(e), feed: e.feed });
    }
  }

  private post(slot: Slot, m: ToThread): boolean {
    if (!slot.worker) return false;
    slot.worker.postMessage(m);
    return true;
  }

  private onThread(slot: Slot, m: FromThread): void {
    switch (m.op) {
      case "ready":
        slot.ready = true;
        return;
      case "ops": {
        if (m.words) {
          try {
            slot.blocksApplied += applyOps(m.words, (id) => this.byId.get(id)?.sink ?? null);
          } catch (e) {
            // A bug (a malformed buffer, an index that threw): the rest of this buffer is lost, the daemon stays up.
            this.logger?.error("kv ingest ops could not be applied", { thread: slot.name, error: e instanceof Error ? e.message : String(e) });
          } finally {
            Atomics.sub(slot.credit, 0, m.words.length);
            Atomics.notify(slot.credit, 0);
          }
        }
        slot.relayInflight = Math.max(0, slot.relayInflight - m.relayed);
        slot.stats = m.stats;
        if (m.status) {
          for (const [id, s] of m.status) {
            const e = this.byId.get(id);
            if (e) e.status = s;
          }
        }
        return;
      }
      case "replay": {
        const e = this.byId.get(m.stream);
        if (!e?.replayer) return void this.post(slot, { op: "replayed", stream: m.stream, id: m.id, batches: null, error: "no replayer" });
        let p;
        try {
          p = e.replayer.replay(m.start);
        } catch (err) {
          p = Promise.reject(err);
        }
        p.then(
          (batches) => this.post(e.slot, { op: "replayed", stream: m.stream, id: m.id, batches, error: null }),
          (err: unknown) => this.post(e.slot, { op: "replayed", stream: m.stream, id: m.id, batches: null, error: err instanceof Error ? err.message : String(err) }),
        );
        return;
      }
      case "selfSized": {
        const e = this.byId.get(m.stream);
        if (!e || e.reserved > 0) return;
        e.selfSized = true;
        e.reserved = this.budget.grant(m.held);
        return this.budget.resizeIndex();
      }
      case "synced": {
        const done = slot.syncs.get(m.id);
        slot.syncs.delete(m.id);
        return done?.();
      }
      case "log":
        return m.level === "error" ? this.logger?.error(m.msg, m.fields) : this.logger?.warn(m.msg, m.fields);
      case "memory":
        return slot.mem.answer(m.id, m.mem);
    }
  }

  private sinkFor(e: Entry): WorkerIndexSink {
    const a = e.applier;
    return {
      stored: (medium, pairs, n) => a.stored(medium, pairs, n),
      removed: (medium, pairs, n) => a.removed(medium, pairs, n),
      cleared: () => {
        a.cleared();
        this.budget.resizeIndex(); // a clear shrinks the index; size it again (KvIngest's onCleared)
      },
    };
  }

  private threadOpts(e: Entry): AddWorkerOptions {
    return { ...e.opts, capacityBlocks: e.reserved };
  }

  private add(worker: string, feed: ThreadFeed, source: KvEventSource | null, replayer: KvReplayer | null, opts: AddWorkerOptions): void {
    if (this.entries.has(worker)) this.removeWorker(worker);
    const { capacityBlocks, ...rest } = opts;
    const reserved = this.budget.grant(capacityBlocks);
    let slot = this.slots[0]!;
    const load = (s: Slot) => [...this.entries.values()].filter((e) => e.slot === s).length;
    for (const s of this.slots) if (load(s) < load(slot)) slot = s;
    const applier = new IndexApplier(worker, this.index);
    const e: Entry = { worker, id: this.nextId++, slot, applier, sink: null as unknown as WorkerIndexSink, status: null, opts: rest, feed, source, replayer, reserved, stated: reserved > 0, selfSized: false };
    e.sink = this.sinkFor(e);
    this.entries.set(worker, e);
    this.byId.set(e.id, e);
    this.budget.resizeIndex();
    this.post(slot, { op: "add", stream: e.id, worker, opts: this.threadOpts(e), feed });
    source?.start(this.relay(e));
  }

  /** An injected source's messages, relayed to the entry's thread (bounded). */
  private relay(e: Entry): KvEventSink {
    return {
      message: (frames) => {
        if (this.entries.get(e.worker) !== e) return;
        const s = e.slot;
        if (s.relayInflight >= this.maxRelayed) return void s.relayDropped++; // a gap for the stream: replay or resync
        if (this.post(s, { op: "frames", stream: e.id, frames: frames.slice() })) s.relayInflight++;
      },
      connection: (up) => {
        if (this.entries.get(e.worker) === e) this.post(e.slot, { op: "connection", stream: e.id, up });
      },
    };
  }

  addWorker(worker: string, source: KvEventSource, replayer: KvReplayer | null, opts: AddWorkerOptions = {}): void {
    this.add(worker, { kind: "relay", replay: replayer !== null }, source, replayer, opts);
  }

  addZmtpWorker(worker: string, feed: ZmtpFeed, opts: AddWorkerOptions = {}): void {
    this.add(worker, { kind: "zmtp", ...feed }, null, null, opts);
  }

  reservedBlocks(): number {
    return this.budget.total();
  }

  setCapacity(worker: string, blocks: number): void {
    const e = this.entries.get(worker);
    const n = e ? this.budget.stated(e, blocks) : 0;
    if (n === 0) return;
    this.post(e!.slot, { op: "capacity", stream: e!.id, blocks: n });
    this.budget.resizeIndex();
  }

  removeWorker(worker: string): void {
    const e = this.entries.get(worker);
    this.entries.delete(worker);
    if (e) {
      this.byId.delete(e.id);
      this.post(e.slot, { op: "remove", stream: e.id });
      try {
        e.source?.close();
        e.replayer?.close?.();
      } catch (err) {
        this.logger?.warn("closing kv event source failed", { worker, error: err instanceof Error ? err.message : String(err) });
      }
    }
    this.index.removeWorker(worker);
    this.budget.resizeIndex();
  }

  stream(worker: string): IngestStreamHandle | undefined {
    const e = this.entries.get(worker);
    if (!e) return undefined;
    return { status: () => this.statusOf(e), reservedBlocks: e.reserved, selfSized: e.selfSized };
  }

  private statusOf(e: Entry): KvStreamStatus {
    const s = e.status ?? emptyStatus(e.worker, e.opts.blockSize ?? null);
    // The index-side counters are the applier's (index-sink.ts).
    return { ...s, blocks: { ...s.blocks, ...e.applier.counters } };
  }

  status(): KvStreamStatus[] {
    return [...this.entries.values()].map((e) => this.statusOf(e));
  }

  /** Resolves once every op each thread made before it was asked has been applied, and statuses are fresh. */
  sync(): Promise<void> {
    return Promise.all(
      this.slots.map(
        (s) =>
          new Promise<void>((resolve) => {
            const id = this.nextSync++;
            s.syncs.set(id, resolve);
            if (!this.post(s, { op: "sync", id })) {
              s.syncs.delete(id);
              resolve();
            }
          }),
      ),
    ).then(() => {});
  }

  threads(): ThreadMemorySource[] {
    return this.slots.map((s) => ({ name: s.name, memory: (gc, timeoutMs) => (this.closed ? Promise.resolve({ error: "not_running" as const }) : s.mem.ask(gc, timeoutMs)) }));
  }

  threadFigures(): IngestThreadFigures[] {
    return this.slots.map((s) => ({ thread: s.name, stalls: s.stats.stalls, stallSeconds: s.stats.stallMs / 1000, restarts: s.restarts, relayDropped: s.relayDropped, blocksApplied: s.blocksApplied, flushes: s.stats.flushes }));
  }

  /** Tests only: make a thread throw (its restart path). */
  failThread(i: number): void {
    const s = this.slots[i];
    if (s) this.post(s, { op: "fail" });
  }

  close(): void {
    if (this.closed) return;
    for (const w of [...this.entries.keys()]) this.removeWorker(w);
    this.closed = true;
    for (const s of this.slots) {
      s.mem.failAll();
      for (const done of s.syncs.values()) done();
      s.syncs.clear();
      s.worker?.terminate();
      s.worker = null;
    }
  }
}

function emptyStatus(worker: string, blockSize: number | null): KvStreamStatus {
  return {
    worker, connected: false, lastSeq: null, lastMessageMs: null, replayInFlight: false, pendingBatches: 0, blockSize, mappedBlocks: 0,
    blocks: { blocksStored: 0, blocksRemoved: 0, parentMissing: 0, unknownRemovals: 0, filtered: 0, unknownMedium: 0, truncatedBlocks: 0, unresolvedBlocks: 0 },
    batchesApplied: 0, eventsApplied: 0, duplicates: 0, gaps: 0, replays: 0, replayFailures: 0, resyncs: 0, restarts: 0, unknownSkipped: 0, invalidEvents: 0, decodeErrors: 0, malformedMessages: 0,
  };
}
