// The simulated engine's KV event publisher, shaped like vLLM's ZmqEventPublisher (docs/references.md#engines-1):
//   - PUB on `endpoint` (bound when it contains `*` or `::`, else connected out, as vLLM decides),
//     one 3-frame message per scheduler step that produced events: [topic, u64be(seq), msgpack batch];
//   - ROUTER on `replay_endpoint` answering [b"", u64be(start)] with every buffered batch whose
//     seq >= start as [b"", topic, u64be(seq), payload] (vLLM ≥ 0.26 layout), then the end marker
//     [b"", b"", ff×8, b""]; the buffer keeps the last `buffer_steps` batches;
//   - seq counts from 0 per process, so a restart shows up as the sequence going backwards;
//   - a fault knob drops a seeded fraction of batches on the PUB side only: they still enter the
//     replay buffer, as a batch lost to the HWM or the network does in vLLM.
import type { Logger } from "../../core/log.ts";
import { wallClockMs } from "../../core/clock.ts";
import { type Rng, SeededRng } from "../../core/rng.ts";
import { blockRemoved, blockStored, encodeKvEventBatch, type KvEventFormat } from "../../protocol/kv-encode.ts";
import type { KvEvent } from "../../protocol/kv-events.ts";
import { END_SEQ_BYTES, seqFrame, seqOf } from "../../protocol/kv-frames.ts";
import { PubSocket, RouterSocket } from "../../transport/zmtp/index.ts";
import type { KvEvent as SimKvEvent } from "./blocks.ts";

/** vLLM's KVEventsConfig (the keys the simulated engine honours). */
export interface KvEventsConfig {
  endpoint: string;
  replayEndpoint: string | null;
  topic: string;
  /** Batches kept for replay (vLLM default 10000). */
  bufferSteps: number;
  /** PUB high-water mark per subscriber, in messages (vLLM default 100000). */
  hwm: number;
}

const KNOWN_KEYS = new Set(["enable_kv_cache_events", "publisher", "endpoint", "replay_endpoint", "topic", "buffer_steps", "hwm", "max_queue_size"]);

/** Parse `--kv-events-config` JSON; null when events are disabled. Throws Error naming the bad key. */
export function parseKvEventsConfig(json: string): KvEventsConfig | null {
  let v: unknown;
  try {
    v = JSON.parse(json);
  } catch (e) {
    throw new Error(`not valid JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (v === null || typeof v !== "object" || Array.isArray(v)) throw new Error("expected a JSON object");
  const o = v as Record<string, unknown>;
  for (const k of Object.keys(o)) if (!KNOWN_KEYS.has(k)) throw new Error(`unknown key ${JSON.stringify(k)}`);
  const str = (k: string, d: string | null): string | null => {
    const x = o[k];
    if (x === undefined || x === null) return d;
    if (typeof x !== "string") throw new Error(`${k} must be a string`);
    return x;
  };
  const int = (k: string, d: number): number => {
    const x = o[k];
    if (x === undefined || x === null) return d;
    if (!Number.isInteger(x) || (x as number) < 1) throw new Error(`${k} must be a positive integer`);
    return x as number;
  };
  if (o.enable_kv_cache_events === false) return null;
  const publisher = str("publisher", "zmq");
  if (publisher === "null") return null;
  if (publisher !== "zmq") throw new Error(`publisher must be "zmq" or "null", got ${JSON.stringify(publisher)}`);
  const endpoint = str("endpoint", "tcp://*:5557")!;
  const replayEndpoint = str("replay_endpoint", null);
  for (const ep of [endpoint, replayEndpoint]) {
    if (ep !== null && !/^tcp:\/\/.+:(\d+|\*)$/.test(ep)) throw new Error(`endpoint ${JSON.stringify(ep)}: only tcp://host:port is supported`);
  }
  return { endpoint, replayEndpoint: replayEndpoint || null, topic: str("topic", "")!, bufferSteps: int("buffer_steps", 10_000), hwm: int("hwm", 100_000) };
}

export interface SimKvPublisherOptions {
  config: KvEventsConfig;
  encoding: KvEventFormat;
  /** Share of batches not sent live (0..1), chosen by a generator seeded with `seed`. */
  dropFraction: number;
  seed: number;
  log?: Logger;
  /** Wall clock in seconds for the batch timestamps (vLLM: time.time()). */
  nowS?: () => number;
  /** Force bind (true) or connect (false) for the PUB endpoint; default: vLLM's wildcard rule. */
  bind?: boolean;
}

export interface SimKvPublisherStats {
  /** Next sequence number: batches produced so far. */
  batches: number;
  /** Batches held back by the drop knob. */
  dropped: number;
  replayRequests: number;
  /** Requests that were not [b"", u64be(start)], ignored like vLLM does. */
  invalidReplayRequests: number;
}

/** vLLM binds when the endpoint holds a wildcard, and connects out otherwise (docs/references.md#engines-1.1). */
export function isBindEndpoint(ep: string): boolean {
  return ep.includes("*") || ep.includes("::");
}

/**
 * The block pool's events as vLLM's KVEventBatch events, with the fields of the newest capture
 * (vLLM v0.26.0, volcano-sh/kthena#1535): medium "GPU", lora_name, extra_keys (one entry per
 * block), group_idx 0, kv_cache_spec_kind "full_attention"; BlockRemoved with group_idx 0. Offloaded
 * blocks (offload.ts) carry medium "CPU" instead, as vLLM's offloading connector reports them.
 */
export function toWireEvents(events: readonly SimKvEvent[]): KvEvent[] {
  return events.map((e): KvEvent => {
    switch (e.type) {
      case "BlockStored":
        return blockStored({
          blockHashes: e.blockHashes, parentBlockHash: e.parentBlockHash, tokenIds: e.tokenIds, blockSize: e.blockSize, medium: e.medium ?? "GPU",
          loraName: e.loraName ?? null, extraKeys: e.extraKeys ?? e.blockHashes.map(() => null), groupIdx: 0, kvCacheSpecKind: "full_attention",
        });
      case "BlockRemoved":
        return { ...blockRemoved(e.blockHashes, e.medium ?? "GPU"), groupIdx: 0 } as KvEvent;
      case "AllBlocksCleared":
        return { type: "AllBlocksCleared" };
    }
  });
}

export class SimKvPublisher {
  readonly stats: SimKvPublisherStats = { batches: 0, dropped: 0, replayRequests: 0, invalidReplayRequests: 0 };
  /** The endpoints as bound (real ports when `*`/0 was asked); the configured ones when connecting. */
  readonly endpoint: string;
  readonly replayEndpoint: string | null;
  private readonly pub: PubSocket;
  private readonly router: RouterSocket | null;
  private readonly topic: Uint8Array;
  /** Ring of the last bufferSteps batches: [seq, payload], oldest first from `head`. */
  private readonly ring: ({ seq: bigint; payload: Uint8Array } | undefined)[];
  private head = 0;
  private count = 0;
  private seq = 0n;
  private readonly rng: Rng;
  private readonly nowS: () => number;

  constructor(private readonly o: SimKvPublisherOptions) {
    if (!(o.dropFraction >= 0 && o.dropFraction <= 1)) throw new RangeError(`drop fraction must be in [0, 1], got ${o.dropFraction}`);
    const { config } = o;
    this.topic = new TextEncoder().encode(config.topic);
    this.rng = new SeededRng(o.seed);
    this.nowS = o.nowS ?? (() => wallClockMs() / 1000);
    this.ring = new Array(config.replayEndpoint ? config.bufferSteps : 0);
    const log = o.log;
    this.pub = new PubSocket({ sndHwm: config.hwm, ...(log ? { log } : {}) });
    try {
      this.endpoint = (o.bind ?? isBindEndpoint(config.endpoint)) ? this.pub.bind(config.endpoint) : (this.pub.connect(config.endpoint), config.endpoint);
      if (config.replayEndpoint) {
        // A full replay is bufferSteps messages plus the end marker: let the ROUTER queue all of it.
        this.router = new RouterSocket({ sndHwm: config.bufferSteps + 2, ...(log ? { log } : {}), onMessage: (id, frames) => this.onReplay(id, frames) });
        this.replayEndpoint = this.router.bind(config.replayEndpoint);
      } else {
        this.router = null;
        this.replayEndpoint = null;
      }
    } catch (e) {
      this.close();
      throw e;
    }
  }

  /** Publish one scheduler step's events (nothing when empty, like vLLM). */
  publish(events: readonly SimKvEvent[]): void {
    if (events.length === 0) return;
    const payload = encodeKvEventBatch({ ts: this.nowS(), events: toWireEvents(events), dpRank: 0 }, this.o.encoding);
    const seq = this.seq++;
    this.stats.batches++;
    if (this.ring.length > 0) {
      this.ring[(this.head + this.count) % this.ring.length] = { seq, payload };
      if (this.count < this.ring.length) this.count++;
      else this.head = (this.head + 1) % this.ring.length;
    }
    if (this.o.dropFraction > 0 && this.rng.float() < this.o.dropFraction) {
      this.stats.dropped++;
      return;
    }
    this.pub.send([this.topic, seqFrame(seq), payload]);
  }

  private onReplay(id: Uint8Array, frames: Uint8Array[]): void {
    if (frames.length !== 2 || frames[0]!.length !== 0 || frames[1]!.length !== 8) {
      this.stats.invalidReplayRequests++;
      this.o.log?.warn("Invalid replay request", { frames: frames.length });
      return;
    }
    this.stats.replayRequests++;
    const start = seqOf(frames[1]!);
    const empty = new Uint8Array(0);
    for (let i = 0; i < this.count; i++) {
      const b = this.ring[(this.head + i) % this.ring.length]!;
      if (b.seq >= start) this.router!.send([id, empty, this.topic, seqFrame(b.seq), b.payload]);
    }
    this.router!.send([id, empty, empty, END_SEQ_BYTES, empty]);
  }

  /** Subscribers currently connected to the PUB socket. */
  get subscribers(): number {
    return this.pub.subscribers;
  }

  close(): void {
    this.pub.close();
    this.router?.close();
  }
}
