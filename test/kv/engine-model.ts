// Test model of a vLLM engine's prefix cache and its KV event publisher, with a faulty link.
// The engine names blocks by its own salted hash chain (like vLLM with a random NONE_HASH per
// process), evicts LRU leaves, mirrors some stores to a CPU tier, and restarts with a new salt and
// seq 0. truth() is the set of (herd hash, medium) it really holds: what the index must converge to.
import type { Clock } from "../../src/core/clock.ts";
import type { Rng } from "../../src/core/rng.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import type { KvEventSink, KvReplayer, ReplayBatch } from "../../src/kv/ingest.ts";
import type { KvEvent } from "../../src/protocol/kv-events.ts";
import { blockRemoved, blockStored, encodeKvEventBatch, type KvEventFormat } from "../../src/protocol/kv-encode.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";

interface Cached {
  ours: bigint;
  parent: bigint | null;
  children: number;
  lastUse: number;
}

export class EngineModel {
  private salt: number;
  private tiers: Record<"GPU" | "CPU", Map<bigint, Cached>> = { GPU: new Map(), CPU: new Map() };
  private tick = 0;

  constructor(
    private readonly rng: Rng,
    readonly blockSize: number,
    private readonly capacity: { GPU: number; CPU: number },
    private readonly offloadProb = 0.3,
  ) {
    this.salt = rng.int(2 ** 32);
  }

  private engineHash(parent: bigint | null, tokens: number[]): bigint {
    const buf = new Uint8Array(8 + tokens.length * 4);
    new DataView(buf.buffer).setBigUint64(0, parent ?? 0n, true);
    new Uint32Array(buf.buffer, 8).set(tokens);
    return Bun.hash.xxHash3(buf, BigInt(this.salt));
  }

  /** Serve a prompt; the events one scheduler step would publish. */
  serve(tokens: number[], lora?: string): KvEvent[] {
    const bs = this.blockSize;
    const ours = blockHashes(tokens, bs, lora);
    const engine: bigint[] = [];
    for (let i = 0, p: bigint | null = null; i < ours.length; i++) {
      p = this.engineHash(p, tokens.slice(i * bs, (i + 1) * bs));
      engine.push(p);
    }
    const gpu = this.tiers.GPU;
    let k = 0;
    while (k < engine.length && gpu.has(engine[k]!)) gpu.get(engine[k++]!)!.lastUse = ++this.tick;
    const events: KvEvent[] = [];
    const protect = new Set(engine.slice(0, k));
    const stored = this.store("GPU", engine, ours, k, tokens, protect, events, lora);
    if (stored > 0 && this.rng.float() < this.offloadProb) {
      // Mirror the new blocks to the CPU tier in the same step (an offloading connector).
      const cpu = this.tiers.CPU;
      let c = k;
      while (c < k + stored && cpu.has(engine[c]!)) c++;
      const parentOk = c === 0 || gpu.has(engine[c - 1]!) || cpu.has(engine[c - 1]!);
      if (parentOk && c < k + stored) this.store("CPU", engine.slice(0, k + stored), ours, c, tokens, new Set(engine.slice(0, c)), events, lora);
    }
    return events;
  }

  private store(
    tier: "GPU" | "CPU", engine: bigint[], ours: bigint[], from: number, tokens: number[],
    protect: Set<bigint>, events: KvEvent[], lora?: string,
  ): number {
    const cache = this.tiers[tier];
    const want = engine.length - from;
    const evictable = () =>
      [...cache.entries()].filter(([h, c]) => c.children === 0 && !protect.has(h)).sort((a, b) => a[1].lastUse - b[1].lastUse);
    let room = this.capacity[tier] - cache.size;
    if (room < want) {
      for (const [h, c] of evictable().slice(0, want - room)) {
        cache.delete(h);
        if (c.parent !== null) {
          const p = cache.get(c.parent);
          if (p) p.children--;
        }
        events.push(blockRemoved([h], tier));
      }
      room = this.capacity[tier] - cache.size;
    }
    const n = Math.min(want, room);
    if (n <= 0) return 0;
    const parent = from > 0 ? engine[from - 1]! : null;
    for (let i = from; i < from + n; i++) {
      const p = i > 0 ? engine[i - 1]! : null;
      cache.set(engine[i]!, { ours: ours[i]!, parent: p, children: 0, lastUse: ++this.tick });
      if (p !== null) {
        const pc = cache.get(p);
        if (pc) pc.children++;
      }
    }
    const bs = this.blockSize;
    events.push(blockStored({
      blockHashes: engine.slice(from, from + n), parentBlockHash: parent,
      tokenIds: tokens.slice(from * bs, (from + n) * bs), blockSize: bs, medium: tier, loraName: lora ?? null,
    }));
    return n;
  }

  /** reset_prefix_cache: everything goes, one AllBlocksCleared. */
  reset(): KvEvent[] {
    this.tiers.GPU.clear();
    this.tiers.CPU.clear();
    return [{ type: "AllBlocksCleared" }];
  }

  /** Process restart: empty caches, a new hash salt, no event. */
  restart(): void {
    this.tiers.GPU.clear();
    this.tiers.CPU.clear();
    this.salt = this.rng.int(2 ** 32);
  }

  /** `${herdHash}|${medium}` for every block the engine holds. */
  truth(): Set<string> {
    const s = new Set<string>();
    for (const c of this.tiers.GPU.values()) s.add(`${c.ours}|gpu`);
    for (const c of this.tiers.CPU.values()) s.add(`${c.ours}|cpu`);
    return s;
  }
}

/** vLLM's ZmqEventPublisher: seq from 0 per process, a bounded replay buffer of batches. */
export class PublisherModel {
  seq = 0n;
  /** Process generation: a replay socket belongs to one process. */
  epoch = 0;
  buffer: ReplayBatch[] = [];
  constructor(
    private readonly clock: Clock,
    readonly bufferSteps: number,
    readonly format: KvEventFormat,
    readonly topic = new TextEncoder().encode("kv@test"),
  ) {}

  publish(events: KvEvent[]): Uint8Array[] {
    const payload = encodeKvEventBatch({ ts: 1.7e9 + this.clock.now() / 1000, events, dpRank: 0 }, this.format);
    const seq = this.seq++;
    this.buffer.push({ seq, payload });
    if (this.buffer.length > this.bufferSteps) this.buffer.shift();
    return [this.topic, seqFrame(seq), payload];
  }

  replay(start: bigint): ReplayBatch[] {
    return this.buffer.filter((b) => b.seq >= start);
  }

  restart(): void {
    this.seq = 0n;
    this.buffer = [];
    this.epoch++;
  }
}

export interface LinkFaults {
  drop: number;
  duplicate: number;
  /** Hold a message back and deliver it after the next one. */
  reorder: number;
}

/** PUB → SUB link that drops, duplicates and reorders messages. */
export class FaultyLink {
  private held: Uint8Array[] | null = null;
  constructor(
    private readonly rng: Rng,
    private readonly sink: KvEventSink,
    public faults: LinkFaults,
  ) {}

  send(frames: Uint8Array[]): void {
    const r = this.rng.float();
    if (r < this.faults.drop) return;
    if (r < this.faults.drop + this.faults.reorder && this.held === null) {
      this.held = frames;
      return;
    }
    this.sink.message(frames);
    if (this.rng.float() < this.faults.duplicate) this.sink.message(frames);
    this.flush();
  }

  flush(): void {
    const h = this.held;
    this.held = null;
    if (h) this.sink.message(h);
  }
}

/** Replay over the model publisher, answered after `delayMs` of the clock, failing at `failProb`. */
export function modelReplayer(clock: Clock, rng: Rng, pub: () => PublisherModel, delayMs: number, failProb = 0): KvReplayer {
  return {
    replay: async (start) => {
      const epoch = pub().epoch;
      await clock.sleep(delayMs);
      if (rng.float() < failProb) throw new Error("replay socket timed out");
      // The DEALER's connection died with the process that had the buffer.
      if (pub().epoch !== epoch) throw new Error("replay peer restarted");
      return pub().replay(start);
    },
  };
}
