// An ingest thread (router.kv_events.ingest_threads > 0; the main thread's side is
// threaded-ingest.ts). It owns some engine workers' KV event streams: their ZMTP SUB and replay
// DEALER sockets (or, for injected sources, frames relayed from the main thread), sequencing, gap
// repair and restarts (KvEventStream), the fast decoder, chain hashing and the engine-hash maps
// (WorkerBlockMap) — the per-worker share of an event's cost (src/kv/README.md "Ingest speed and
// worker threads"). What it produces is index ops (op-stream.ts), flushed once per event-loop turn
// (or sooner when many are written) and applied by the main thread to the one BlockIndex the
// router reads, in each worker's event order.
//
// Bounded: ops posted but not yet applied are counted in a shared word (`credit`). Above the
// limit the thread waits (Atomics.wait) before it reads anything more, so its sockets stop being
// read and backpressure reaches the engines, as when the single-threaded main thread is busy: a
// publisher beyond its high-water mark drops batches, which the stream sees as a gap (replay or
// resync). Stalls and their time are counted (herd_kv_ingest_stall_seconds_total).
import { RealClock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { measureThreadMemory } from "../core/thread-memory.ts";
import { heapStats } from "bun:jsc";
import { KvEventStream, clampCapacity, type KvEventSink, type KvReplayer, type KvStreamStatus, type ReplayBatch } from "./ingest.ts";
import { OpWriter } from "./op-stream.ts";
import { ZmtpKvReplayer, ZmtpKvSource } from "./zmtp-source.ts";

declare const self: Worker;

export interface ThreadStreamOptions {
  blockSize?: number;
  replayTimeoutMs?: number;
  maxPendingBatches?: number;
  capacityBlocks?: number;
}

/** How a stream's batches reach the thread: its own sockets, or frames relayed by the main thread. */
export type ThreadFeed =
  | { kind: "zmtp"; endpoint: string; topic: string; replayEndpoint: string; seed: number; replayTimeoutMs: number }
  | { kind: "relay"; replay: boolean };

export type ToThread =
  | { op: "init"; credit: SharedArrayBuffer; maxInflightWords: number; statusIntervalMs: number }
  | { op: "add"; stream: number; worker: string; opts: ThreadStreamOptions; feed: ThreadFeed }
  | { op: "remove"; stream: number }
  | { op: "frames"; stream: number; frames: Uint8Array[] }
  | { op: "connection"; stream: number; up: boolean }
  | { op: "replayed"; stream: number; id: number; batches: ReplayBatch[] | null; error: string | null }
  | { op: "capacity"; stream: number; blocks: number }
  | { op: "sync"; id: number }
  | { op: "memory"; id: number; gc: boolean }
  /** Tests only: throw from the message handler (an uncaught error kills the thread). */
  | { op: "fail" };

export interface ThreadStats {
  stalls: number;
  stallMs: number;
  flushes: number;
  blocks: number;
}

export type FromThread =
  | { op: "ready" }
  | { op: "ops"; words: Uint32Array | null; relayed: number; status: [number, KvStreamStatus][] | null; stats: ThreadStats }
  | { op: "replay"; stream: number; id: number; start: bigint }
  | { op: "selfSized"; stream: number; held: number }
  | { op: "synced"; id: number }
  | { op: "log"; level: "warn" | "error"; msg: string; fields: Record<string, unknown> }
  | { op: "memory"; id: number; mem: ReturnType<typeof measureThreadMemory> };

const post = (m: FromThread, transfer?: ArrayBuffer[]) => self.postMessage(m, transfer ?? []);

/** Logs go to the main thread's logger (warn and error; the thread's own debug/info are dropped). */
function threadLog(component: string): Logger {
  const send = (level: "warn" | "error") => (msg: string, fields: Record<string, unknown> = {}) => post({ op: "log", level, msg, fields: { component, ...fields } });
  return { debug: () => {}, info: () => {}, warn: send("warn"), error: send("error"), child: (c) => threadLog(`${component}.${c}`) };
}

interface Held {
  stream: KvEventStream;
  close(): void;
  /** Relay feed: the sink frames go to, and pending replay answers. */
  sink: KvEventSink;
  replies: Map<number, { resolve(b: ReplayBatch[]): void; reject(e: Error): void }>;
}

const clock = new RealClock();
const writer = new OpWriter(() => wrote());
const streams = new Map<number, Held>();
const stats: ThreadStats = { stalls: 0, stallMs: 0, flushes: 0, blocks: 0 };
let credit = new Int32Array(new SharedArrayBuffer(4));
let maxInflight = 1 << 22;
let statusIntervalMs = 100;
let lastStatusMs = -Infinity;
let relayed = 0;
let scheduled = false;
let nextReply = 1;
/** Flush early once this many op words are waiting (keeps one transfer small). */
const FLUSH_WORDS = 1 << 16;

/** The status each stream last sent (the main thread keeps it until a newer one comes). */
const sentStatus = new Map<number, KvStreamStatus>();

/** Same figures (KvStreamStatus is flat but for `blocks`, whose fields are numbers). */
function sameStatus(a: KvStreamStatus, b: KvStreamStatus): boolean {
  for (const k in a) {
    if (k === "blocks") continue;
    if (a[k as keyof KvStreamStatus] !== b[k as keyof KvStreamStatus]) return false;
  }
  for (const k in a.blocks) if (a.blocks[k as keyof KvStreamStatus["blocks"]] !== b.blocks[k as keyof KvStreamStatus["blocks"]]) return false;
  return true;
}

/**
 * The statuses that changed since they were last sent, every statusIntervalMs (or now, for a sync),
 * or null. Only changed ones: cloning every stream's status into each ops message cost ~2.5 µs a
 * stream per message on each side, and idle streams change nothing (docs/benchmarks.md "Threaded
 * KV ingest in the daemon").
 */
function statusOf(all: boolean): [number, KvStreamStatus][] | null {
  const now = clock.now();
  if (!all && now - lastStatusMs < statusIntervalMs) return null;
  lastStatusMs = now;
  const out: [number, KvStreamStatus][] = [];
  for (const [id, h] of streams) {
    const s = h.stream.status();
    const prev = sentStatus.get(id);
    if (prev && sameStatus(prev, s)) continue;
    sentStatus.set(id, s);
    out.push([id, s]);
  }
  return out.length > 0 ? out : null;
}

/** Post the ops written so far (and, now and then, every stream's status); then wait while over the limit. */
function flush(allStatus = false): void {
  scheduled = false;
  const blocks = writer.blocks;
  const words = writer.take();
  const status = statusOf(allStatus);
  // A sync always gets an answer that carries the thread's latest stats (stalls counted after the last post).
  if (!words && !status && relayed === 0 && !allStatus) return;
  stats.flushes++;
  stats.blocks += blocks;
  if (words) Atomics.add(credit, 0, words.length);
  post({ op: "ops", words, relayed, status, stats: { ...stats } }, words ? [words.buffer as ArrayBuffer] : []);
  relayed = 0;
  if (Atomics.load(credit, 0) <= maxInflight) return;
  // The main thread is behind: read nothing more until it has applied enough.
  stats.stalls++;
  const t0 = performance.now();
  for (let v = Atomics.load(credit, 0); v > maxInflight; v = Atomics.load(credit, 0)) Atomics.wait(credit, 0, v, 100);
  stats.stallMs += performance.now() - t0;
}

/**
 * After each op record (OpWriter's onWrite, whatever wrote it: a socket message, a replay reply, a
 * timer) and each relayed message: flush at this turn's end (setImmediate runs after the turn's
 * promise callbacks), or now when many are waiting.
 */
function wrote(): void {
  if (writer.words >= FLUSH_WORDS) return flush();
  if (!scheduled) {
    scheduled = true;
    setImmediate(() => flush());
  }
}

/** Every statusIntervalMs: flush (ops, if any were left, and every stream's status). */
function tick(): void {
  clock.setTimer(statusIntervalMs, () => {
    flush();
    tick();
  });
}

function add(id: number, worker: string, opts: ThreadStreamOptions, feed: ThreadFeed): void {
  const log = threadLog(`kv.${worker}`);
  const replies: Held["replies"] = new Map();
  let replayer: KvReplayer | null = null;
  let source: ZmtpKvSource | null = null;
  if (feed.kind === "zmtp") {
    const base = { log, clock, seed: feed.seed };
    source = new ZmtpKvSource(feed.endpoint, feed.topic, base);
    replayer = feed.replayEndpoint ? new ZmtpKvReplayer(feed.replayEndpoint, { ...base, timeoutMs: feed.replayTimeoutMs }) : null;
  } else if (feed.replay) {
    replayer = {
      replay: (start) =>
        new Promise<ReplayBatch[]>((resolve, reject) => {
          const rid = nextReply++;
          replies.set(rid, { resolve, reject });
          post({ op: "replay", stream: id, id: rid, start });
        }),
    };
  }
  const stream = new KvEventStream(worker, writer.sink(id), {
    clock,
    replayer,
    ...opts,
    capacityBlocks: clampCapacity(opts.capacityBlocks),
    // The main thread budgets the index for it (KvIngest's shared cap); the map here takes the estimate.
    selfSize: (held) => {
      post({ op: "selfSized", stream: id, held });
      return clampCapacity(held);
    },
    logger: log,
  });
  const sink: KvEventSink = stream;
  const held: Held = {
    stream,
    sink,
    replies,
    close: () => {
      stream.close();
      source?.close();
      replayer?.close?.();
      for (const r of replies.values()) r.reject(new Error("stream removed"));
    },
  };
  streams.set(id, held);
  source?.start(sink);
}

function onMessage(m: ToThread): void {
  switch (m.op) {
    case "init":
      credit = new Int32Array(m.credit);
      maxInflight = m.maxInflightWords;
      statusIntervalMs = m.statusIntervalMs;
      // Statuses also go out when no ops do (a connection came up, a replay is in flight).
      tick();
      return post({ op: "ready" });
    case "add":
      streams.get(m.stream)?.close();
      sentStatus.delete(m.stream);
      return add(m.stream, m.worker, m.opts, m.feed);
    case "remove": {
      const h = streams.get(m.stream);
      streams.delete(m.stream);
      sentStatus.delete(m.stream);
      return h?.close();
    }
    case "frames": {
      relayed++;
      const h = streams.get(m.stream);
      h?.sink.message(m.frames);
      return wrote(); // acknowledges the relayed message (ops message `relayed`)
    }
    case "connection":
      return streams.get(m.stream)?.sink.connection(m.up);
    case "replayed": {
      const h = streams.get(m.stream);
      const r = h?.replies.get(m.id);
      if (!h || !r) return;
      h.replies.delete(m.id);
      if (m.batches) r.resolve(m.batches);
      else r.reject(new Error(m.error ?? "replay failed"));
      return;
    }
    case "capacity":
      return streams.get(m.stream)?.stream.reserveCapacity(m.blocks);
    case "sync":
      // Replies and timers may still be settling: let their callbacks run, then flush everything.
      return void setImmediate(() => {
        flush(true);
        post({ op: "synced", id: m.id });
      });
    case "memory":
      return post({ op: "memory", id: m.id, mem: measureThreadMemory(m.gc, heapStats) });
    case "fail":
      throw new Error("ingest thread asked to fail (test)");
  }
}

self.onmessage = (ev: MessageEvent) => onMessage(ev.data as ToThread);
