// Per-worker KV event stream state: sequence numbers, gap repair through the engine's replay
// socket, restart detection, and resync. Sockets are injected (KvEventSource, KvReplayer), time
// through a Clock, so the whole state machine runs in tests on in-memory fakes and a VirtualClock.
//
// Rules (docs/references.md#engines-1.2, #engines-1.3, #engines-8):
//  - seq == last+1: apply. seq <= last: a duplicate (dropped) unless the publisher restarted.
//  - seq > last+1: a gap. Later messages wait in a bounded buffer while the replay endpoint is
//    asked for [b"", u64be(last+1)]; replayed batches fill the hole.
//  - If the replay cannot fill the hole (its buffer moved on, no replay endpoint, timeout, error,
//    buffer overflow) the worker's index entries are cleared and rebuilt from the events we have:
//    a lost batch may hold removals, so keeping old entries could claim blocks the engine dropped.
//  - Restart: seq going backwards with a newer batch timestamp, or any discontinuity right after
//    the transport reconnected. The worker is cleared and its new stream replayed from seq 0.
//  - The first message of a stream with seq > 0 (herd joined late) asks for a replay from 0.
import type { Clock, TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { decodeKvEventBatch, decodeKvEventBatchPairs } from "../protocol/kv-events.ts";
import { KvOps, OP_CLEARED, OP_REMOVED, OP_STORED, readKvOps } from "../protocol/kv-events-fast.ts";
import { parseLiveMessage } from "../protocol/kv-frames.ts";
import type { WorkerIndexSink } from "./index-sink.ts";
import type { KvIndex } from "./indexer.ts";
import { WorkerBlockMap, type WorkerBlockCounters } from "./worker-blocks.ts";

export interface KvEventSink {
  /** One live message as received: [topic, u64be(seq), payload]. */
  message(frames: readonly Uint8Array[]): void;
  /** The subscription went up or down (the transport reconnects by itself). */
  connection(up: boolean): void;
}

/** The SUB side: delivers a worker's live messages to a sink until closed. */
export interface KvEventSource {
  start(sink: KvEventSink): void;
  close(): void;
}

export interface ReplayBatch {
  seq: bigint;
  payload: Uint8Array;
}

/** The DEALER side: every batch the engine still buffers with seq >= startSeq, in order. */
export interface KvReplayer {
  replay(startSeq: bigint): Promise<ReplayBatch[]>;
  close?(): void;
}

export interface KvStreamOptions {
  clock: Clock;
  replayer?: KvReplayer | null;
  /** The worker's KV block size; learned from the first store when absent. */
  blockSize?: number;
  replayTimeoutMs?: number;
  /** Live batches held while a gap is repaired; beyond this the worker resyncs. */
  maxPendingBatches?: number;
  /** Consecutive replays that leave a hole past their reply before giving up and resyncing. */
  maxReplayRetries?: number;
  /**
   * The engine's KV capacity in blocks, when known (sim --kv-blocks, vLLM num_gpu_blocks): the
   * engine-hash map is sized for it up front and again after each clear, so ingest never pays for
   * growing it (rehash copies + first-touch page faults). Clamped to MAX_RESERVED_BLOCKS.
   */
  capacityBlocks?: number;
  /**
   * Read batches with the fast path (protocol/kv-events-fast.ts) when it takes them (default);
   * false decodes every batch with decodeKvEventBatchPairs (the reference; differential tests).
   */
  fastPath?: boolean;
  /**
   * With no capacity known (no hint, none learned yet): called once, at the worker's first eviction,
   * with the engine hashes it held just before (≈ the engine's capacity:
   * WorkerBlockMap.onFirstEviction); returns the blocks to size the tables for (KvIngest: within
   * its shared budget, and it sizes the index). Absent: the stream sizes its map for that count.
   * So a worker whose engine states no capacity reaches the hinted tables' steady state after one
   * rebuild instead of running at whatever load its grown tables happened to stop at.
   */
  selfSize?: (heldBlocks: number) => number;
  /** Called after the worker's blocks were cleared (resync, restart, AllBlocksCleared). */
  onCleared?: () => void;
  logger?: Logger;
}

/**
 * Upper bound of any capacity hint (and, in KvIngest, of all hints together): at most ~133 MB of
 * engine-hash maps, and an index of 20 B + 12 B per 32 workers per slot at 60 % load (~133 MB for
 * up to 32 workers). Untouched pages of a reservation are not resident.
 */
export const MAX_RESERVED_BLOCKS = 4_000_000;

/** A usable capacity hint: a positive integer, at most MAX_RESERVED_BLOCKS; anything else → 0. */
export function clampCapacity(blocks: number | undefined): number {
  if (blocks === undefined || !Number.isFinite(blocks) || blocks < 1) return 0;
  return Math.min(Math.floor(blocks), MAX_RESERVED_BLOCKS);
}

export interface KvStreamCounters {
  batchesApplied: number;
  eventsApplied: number;
  duplicates: number;
  gaps: number;
  replays: number;
  replayFailures: number;
  resyncs: number;
  restarts: number;
  /** Unknown event types + unknown fields, skipped. */
  unknownSkipped: number;
  invalidEvents: number;
  decodeErrors: number;
  malformedMessages: number;
}

export interface KvStreamStatus extends KvStreamCounters {
  worker: string;
  connected: boolean;
  /** Last applied sequence number (decimal string: u64), null before the first. */
  lastSeq: string | null;
  lastMessageMs: number | null;
  replayInFlight: boolean;
  pendingBatches: number;
  blockSize: number | null;
  /** Engine block hashes currently mapped for this worker. */
  mappedBlocks: number;
  blocks: WorkerBlockCounters;
}

export class KvEventStream implements KvEventSink {
  readonly blocks: WorkerBlockMap;
  readonly counters: KvStreamCounters = {
    batchesApplied: 0, eventsApplied: 0, duplicates: 0, gaps: 0, replays: 0, replayFailures: 0, resyncs: 0,
    restarts: 0, unknownSkipped: 0, invalidEvents: 0, decodeErrors: 0, malformedMessages: 0,
  };
  private last = -1n;
  private fresh = true;
  private lastTs = -Infinity;
  private pending = new Map<bigint, Uint8Array>();
  private replaying: { gen: number; timer: TimerHandle } | null = null;
  private gen = 0;
  private retries = 0;
  private connected = false;
  private reconnected = false;
  private lastMessageMs: number | null = null;
  private closed = false;
  private readonly clock: Clock;
  private readonly replayer: KvReplayer | null;
  private readonly replayTimeoutMs: number;
  private readonly maxPending: number;
  private readonly maxRetries: number;
  private readonly log: Logger | undefined;
  private capacity: number;
  private readonly onCleared: (() => void) | undefined;
  private readonly fastPath: boolean;

  /** `index`: the index itself, or a sink for its ops (an ingest thread's, ingest-thread.ts). */
  constructor(
    readonly worker: string,
    index: KvIndex | WorkerIndexSink,
    opts: KvStreamOptions,
  ) {
    this.blocks = new WorkerBlockMap(worker, index, opts.blockSize !== undefined ? { blockSize: opts.blockSize } : {});
    this.clock = opts.clock;
    this.replayer = opts.replayer ?? null;
    this.replayTimeoutMs = opts.replayTimeoutMs ?? 2_000;
    this.maxPending = opts.maxPendingBatches ?? 4_096;
    this.maxRetries = opts.maxReplayRetries ?? 3;
    this.log = opts.logger;
    this.capacity = clampCapacity(opts.capacityBlocks);
    this.onCleared = opts.onCleared;
    this.fastPath = opts.fastPath ?? true;
    if (this.capacity > 0) this.blocks.reserve(this.capacity);
    const selfSize = opts.selfSize ?? clampCapacity;
    this.blocks.onFirstEviction = (held) => {
      if (this.capacity > 0 || this.closed) return; // a capacity came in meanwhile (setCapacity)
      const n = selfSize(held);
      if (n <= 0) return;
      this.selfSized = true;
      this.reserveCapacity(n);
    };
  }

  /** Whether the tables were sized from the worker's first eviction (no capacity was known). */
  selfSized = false;

  /** Blocks the engine-hash map is sized for (0 = no hint and no eviction yet: it grows). */
  get reservedBlocks(): number {
    return this.capacity;
  }

  /** The engine's capacity became known after the start (vLLM reports it in /metrics): size for it. */
  reserveCapacity(blocks: number): void {
    const c = clampCapacity(blocks);
    if (c <= this.capacity) return;
    this.capacity = c;
    this.blocks.reserve(c);
  }

  private clearBlocks(): void {
    this.blocks.clear();
    this.cleared();
  }

  /** A clear shrinks the tables; size them again for the engine's capacity. */
  private cleared(): void {
    if (this.capacity > 0) this.blocks.reserve(this.capacity);
    this.onCleared?.();
  }

  message(frames: readonly Uint8Array[]): void {
    if (this.closed) return;
    let msg;
    try {
      msg = parseLiveMessage(frames);
    } catch {
      this.counters.malformedMessages++;
      return;
    }
    this.lastMessageMs = this.clock.now();
    this.connected = true;
    this.receive(msg.seq, msg.payload);
    this.reconnected = false;
  }

  connection(up: boolean): void {
    if (up && !this.connected && !this.fresh) this.reconnected = true;
    this.connected = up;
  }

  private receive(seq: bigint, payload: Uint8Array): void {
    if (this.fresh) {
      this.fresh = false;
      if (seq > 0n) {
        if (this.replayer) {
          this.hold(seq, payload);
          if (!this.replaying) this.requestReplay(0n);
          return;
        }
        this.last = seq - 1n; // no way to learn the past: start from here
      }
    }
    const next = this.last + 1n;
    if (seq === next) {
      this.applyPayload(seq, payload);
      this.drain();
      return;
    }
    if (this.reconnected || (seq < next && this.newerThanApplied(payload))) {
      this.restart(seq);
      this.receive(seq, payload);
      return;
    }
    if (seq < next || this.pending.has(seq)) {
      this.counters.duplicates++;
      return;
    }
    this.hold(seq, payload);
    if (this.closed || this.replaying || !this.pending.has(seq)) return; // hold() may have resynced
    this.counters.gaps++;
    if (this.replayer) this.requestReplay(next);
    else this.resync("gap and no replay endpoint");
  }

  /** A batch at or below the last applied seq but stamped later: the publisher restarted. */
  private newerThanApplied(payload: Uint8Array): boolean {
    try {
      return decodeKvEventBatch(payload).ts > this.lastTs;
    } catch {
      return false;
    }
  }

  private restart(seq: bigint): void {
    this.counters.restarts++;
    this.log?.warn("kv event stream restarted; clearing worker", { worker: this.worker, seq, last: this.last });
    this.cancelReplay();
    this.pending.clear();
    this.clearBlocks();
    this.last = -1n;
    this.lastTs = -Infinity;
    this.fresh = true;
    this.reconnected = false;
    this.retries = 0;
  }

  private hold(seq: bigint, payload: Uint8Array): void {
    this.pending.set(seq, payload);
    if (this.pending.size > this.maxPending) this.resync(`more than ${this.maxPending} batches waiting for a gap`);
  }

  private drain(): void {
    for (let p = this.pending.get(this.last + 1n); p !== undefined; p = this.pending.get(this.last + 1n)) {
      const seq = this.last + 1n;
      this.pending.delete(seq);
      this.applyPayload(seq, p);
    }
  }

  /** The fast path's columns for one batch (reused). */
  private ops: KvOps | null = null;

  private applyPayload(seq: bigint, payload: Uint8Array): void {
    this.last = seq;
    if (this.fastPath) {
      const ops = (this.ops ??= new KvOps());
      if (readKvOps(payload, ops)) return this.applyOps(ops);
    }
    let batch;
    try {
      batch = decodeKvEventBatchPairs(payload);
    } catch (e) {
      // The batch's effect is unknown, so nothing we hold for this worker can be trusted.
      this.counters.decodeErrors++;
      this.counters.resyncs++;
      this.log?.warn("undecodable kv event batch; clearing worker", { worker: this.worker, seq, error: errorMessage(e) });
      this.clearBlocks();
      return;
    }
    for (const ev of batch.events) {
      this.blocks.applyDeferred(ev);
      if (ev.type === "AllBlocksCleared") this.cleared();
    }
    this.blocks.flush();
    this.lastTs = batch.ts;
    this.counters.batchesApplied++;
    this.counters.eventsApplied += batch.events.length;
    this.counters.unknownSkipped += batch.unknownEvents + batch.unknownFields;
    this.counters.invalidEvents += batch.invalidEvents;
  }

  /**
   * A batch read by the fast path (kv-events-fast.ts): the same calls, in the same order, as
   * applying decodeKvEventBatchPairs' events would make, without an object per event.
   */
  private applyOps(o: KvOps): void {
    const blocks = this.blocks;
    // Every engine hash of the batch is looked up in the worker's map: touch them all first.
    blocks.prefetch(o.hashes, 0, o.nHashes);
    for (let e = 0; e < o.n; e++) {
      const k = o.kind[e]!;
      if (k === OP_REMOVED) {
        // vLLM sends one BlockRemoved per evicted block: a run of removals with the same fields is
        // one call (their hashes are consecutive in the columns), in the same order.
        const g = o.group[e]!;
        const loc = o.locality[e]!;
        const med = o.medium[e]!;
        let last = e;
        while (last + 1 < o.n && o.kind[last + 1] === OP_REMOVED && o.group[last + 1] === g && o.locality[last + 1] === loc && o.medium[last + 1] === med) last++;
        const h0 = o.hStart[e]!;
        blocks.removedFrom(g, loc, med, o.hashes, h0, o.hStart[last]! + o.hCount[last]! - h0, last - e + 1);
        e = last;
      } else if (k === OP_STORED) {
        blocks.flush();
        const t0 = o.tStart[e]!;
        const tokens = o.tokens.subarray(t0, t0 + o.tCount[e]!);
        blocks.storedFrom(o.group[e]!, o.specKind[e]!, o.locality[e]!, o.medium[e]!, tokens, o.blockSize[e]!, o.hasParent[e] === 1, o.parentLo[e]!, o.parentHi[e]!, null, o.lora[e]!, o.hashes, o.hStart[e]!, o.hCount[e]!);
      } else if (k === OP_CLEARED) {
        blocks.flush();
        blocks.clear();
        this.cleared();
      }
    }
    blocks.flush();
    this.lastTs = o.ts;
    this.counters.batchesApplied++;
    this.counters.eventsApplied += o.n;
  }

  private requestReplay(start: bigint): void {
    const replayer = this.replayer!;
    const gen = ++this.gen;
    this.counters.replays++;
    const timer = this.clock.setTimer(this.replayTimeoutMs, () => this.replayDone(gen, start, null, "timeout"));
    this.replaying = { gen, timer };
    let p: Promise<ReplayBatch[]>;
    try {
      p = replayer.replay(start);
    } catch (e) {
      p = Promise.reject(e);
    }
    p.then(
      (batches) => this.replayDone(gen, start, batches, null),
      (e) => this.replayDone(gen, start, null, errorMessage(e)),
    );
  }

  private cancelReplay(): void {
    this.replaying?.timer.cancel();
    this.replaying = null;
    this.gen++;
  }

  private replayDone(gen: number, start: bigint, batches: ReplayBatch[] | null, error: string | null): void {
    if (this.closed || !this.replaying || this.replaying.gen !== gen) return;
    this.replaying.timer.cancel();
    this.replaying = null;
    if (batches === null) {
      this.counters.replayFailures++;
      this.resync(`replay from ${start} failed: ${error}`);
      return;
    }
    let maxSeq = start - 1n;
    for (const b of batches) {
      if (b.seq > this.last) this.pending.set(b.seq, b.payload);
      if (b.seq > maxSeq) maxSeq = b.seq;
    }
    this.drain();
    if (this.pending.size === 0) {
      this.retries = 0;
      return;
    }
    const next = this.last + 1n;
    if (next <= maxSeq) {
      this.resync(`replay no longer holds seq ${next}`);
    } else if (this.retries < this.maxRetries) {
      // The hole lies past what the replay returned: lost after the replay was served.
      this.retries++;
      this.requestReplay(next);
    } else {
      this.resync(`seq ${next} still missing after ${this.retries} replays`);
    }
  }

  /** Clear the worker and rebuild it from the newest run of consecutive batches we hold. */
  private resync(reason: string): void {
    this.counters.resyncs++;
    this.log?.warn("kv event stream resync; clearing worker", { worker: this.worker, reason });
    this.cancelReplay();
    this.retries = 0;
    this.clearBlocks();
    const seqs = [...this.pending.keys()].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    let from = seqs.length - 1;
    while (from > 0 && seqs[from - 1]! === seqs[from]! - 1n) from--;
    const run = seqs.slice(Math.max(from, 0)).map((s) => [s, this.pending.get(s)!] as const);
    this.pending.clear();
    for (const [s, p] of run) this.applyPayload(s, p);
  }

  status(): KvStreamStatus {
    return {
      worker: this.worker,
      connected: this.connected,
      lastSeq: this.last >= 0n ? this.last.toString() : null,
      lastMessageMs: this.lastMessageMs,
      replayInFlight: this.replaying !== null,
      pendingBatches: this.pending.size,
      blockSize: this.blocks.blockSize,
      mappedBlocks: this.blocks.size,
      blocks: { ...this.blocks.counters },
      ...this.counters,
    };
  }

  /** Stop processing (the worker left). Index entries are removed by the owner (KvIngest). */
  close(): void {
    this.closed = true;
    this.cancelReplay();
    this.pending.clear();
  }
}
