// The ZMTP side of one worker's KV events: a SUB on its publisher (live batches) and a DEALER on
// its replay socket (gap repair), adapting libzmq-compatible sockets to the KvEventSource /
// KvReplayer seams of ingest.ts. Kept apart from KvConsumer (consumer.ts) because these own
// sockets, timers and wire parsing, while the consumer only tracks worker lifecycle; tests inject
// fakes for these through KvConsumerOptions.connect.
//
// Bounds: SUB delivery is by callback (no receive queue; TCP backpressure while we apply), one
// replay in flight per worker, replies capped in batches and bytes.
import { type Clock, RealClock, type TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { SeededRng } from "../core/rng.ts";
import { parseReplayMessage, replayRequest } from "../protocol/kv-frames.ts";
import { DealerSocket, SubSocket } from "../transport/zmtp/index.ts";
import type { KvEventSink, KvEventSource, KvReplayer, ReplayBatch } from "./ingest.ts";

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
