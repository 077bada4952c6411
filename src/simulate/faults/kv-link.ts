// One engine process's KV event publisher and the wire to herd, in memory: the sim scheduler's
// events are encoded exactly as the sim engine's ZMQ publisher encodes them (kv-publisher.ts
// toWireEvents + protocol/kv-encode.ts), numbered from 0 per process, kept in a replay ring of
// `bufferSteps` batches, and delivered in order (ZMQ over TCP keeps order) after a seeded delay to
// the REAL ingest (src/kv/ingest.ts KvEventStream through KvConsumer's `connect` seam). Faults: a
// share of batches lost on the live path (they stay in the ring, as one lost to the HWM does), a
// replay socket that fails, extra delay (a slow link). A killed process sends nothing more.
import type { Clock } from "../../core/clock.ts";
import type { Rng } from "../../core/rng.ts";
import type { KvEvent as SimKvEvent } from "../../engine/sim/blocks.ts";
import { toWireEvents } from "../../engine/sim/kv-publisher.ts";
import { encodeKvEventBatch } from "../../protocol/kv-encode.ts";
import { seqFrame } from "../../protocol/kv-frames.ts";
import type { KvEventSink, KvEventSource, KvReplayer, ReplayBatch } from "../../kv/ingest.ts";

export interface KvLinkFaults {
  /** Share of live batches lost (0..1). */
  dropShare: number;
  /** The replay socket answers with an error. */
  replayDown: boolean;
  /** Added to every delivery. */
  extraDelayMs: number;
}

export interface KvLinkCounters {
  published: number;
  dropped: number;
  replays: number;
}

const TOPIC = new Uint8Array(0);

export class VirtualKvLink {
  alive = true;
  private seq = 0n;
  private readonly ring: ReplayBatch[] = [];
  private sink: KvEventSink | null = null;
  private lastDeliveryMs = 0;

  constructor(
    private readonly clock: Clock,
    private readonly rng: Rng,
    private readonly faults: KvLinkFaults,
    private readonly counters: KvLinkCounters,
    private readonly bufferSteps: number,
    /** Batch timestamps (vLLM: time.time()); later processes stamp later, which is how ingest tells a restart. */
    private readonly tsBaseS: number,
  ) {}

  /** Sequence number of the last batch published (-1: none yet). */
  get lastSeq(): bigint {
    return this.seq - 1n;
  }

  publish(events: readonly SimKvEvent[]): void {
    if (!this.alive || events.length === 0) return;
    const payload = encodeKvEventBatch({ ts: this.tsBaseS + this.clock.now() / 1000, events: toWireEvents(events), dpRank: 0 });
    const seq = this.seq++;
    this.counters.published++;
    this.ring.push({ seq, payload });
    if (this.ring.length > this.bufferSteps) this.ring.shift();
    if (this.faults.dropShare > 0 && this.rng.float() < this.faults.dropShare) return void this.counters.dropped++;
    const at = Math.max(this.lastDeliveryMs, this.clock.now() + 1 + this.rng.int(3) + this.faults.extraDelayMs);
    this.lastDeliveryMs = at;
    this.clock.setTimer(at - this.clock.now(), () => {
      if (this.alive) this.sink?.message([TOPIC, seqFrame(seq), payload]);
    });
  }

  source(): KvEventSource {
    return {
      start: (sink) => {
        this.sink = sink;
        sink.connection(true);
      },
      close: () => {
        this.sink = null;
      },
    };
  }

  replayer(): KvReplayer {
    return {
      replay: (start) => {
        this.counters.replays++;
        const down = this.faults.replayDown || !this.alive;
        const batches = this.ring.filter((b) => b.seq >= start);
        return new Promise<ReplayBatch[]>((resolve, reject) => {
          this.clock.setTimer(2 + this.rng.int(4) + this.faults.extraDelayMs, () => (down ? reject(new Error("replay socket unreachable")) : resolve(batches)));
        });
      },
    };
  }
}
