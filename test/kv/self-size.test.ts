// A worker whose engine states no KV capacity sizes its tables once, at its first eviction (an
// engine evicts only when full, so the blocks it then holds ≈ its capacity): its engine-hash map
// and the shared index are rebuilt to the reserved load (60 %, u64-table.ts RESERVE_LOAD) instead
// of running at whatever load growth left them (here 73 %). Asserted on table sizes, not timing.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { KvEventStream, type KvEventSink } from "../../src/kv/ingest.ts";
import { KvIngest } from "../../src/kv/ingest-manager.ts";
import type { KvEvent } from "../../src/protocol/kv-events.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";

const BS = 4;
// 3,200 blocks: the map grows 256 → … → 4,374 slots (73 % load); the index 1,024 → … → 5,184 (62 %).
const N = 3_200;
const PER_BATCH = 100;
const tokens = Array.from({ length: N * BS }, (_, i) => 1_000 + ((i * 7919) % 150_000));
const ours = blockHashes(tokens, BS);
const engineHash = (i: number) => 90_000n + BigInt(i);

function fill(): KvEvent[][] {
  const out: KvEvent[][] = [];
  for (let b = 0; b < N; b += PER_BATCH) {
    const hashes = Array.from({ length: PER_BATCH }, (_, k) => engineHash(b + k));
    out.push([blockStored({ blockHashes: hashes, parentBlockHash: b === 0 ? null : engineHash(b - 1), tokenIds: tokens.slice(b * BS, (b + PER_BATCH) * BS), blockSize: BS })]);
  }
  return out;
}

function worker(ingest: KvIngest, name: string, capacityBlocks?: number) {
  let sink: KvEventSink | null = null;
  let seq = 0;
  const stream = ingest.addWorker(name, { start: (s) => void (sink = s), close: () => {} }, null, { blockSize: BS, ...(capacityBlocks !== undefined ? { capacityBlocks } : {}) });
  const send = (events: KvEvent[]) => sink!.message([new Uint8Array(0), seqFrame(BigInt(seq++)), encodeKvEventBatch({ ts: 1_000 + seq, events }, "map")]);
  return { stream, send };
}

/** Slots needed to hold `n` entries at the reserved 60 % load. */
const atReservedLoad = (n: number) => n / 0.6;

describe("self-sizing at the first eviction (no capacity known)", () => {
  test("the worker's map and the index are rebuilt to the reserved load, once", () => {
    const index = new BlockIndex();
    const ingest = new KvIngest(index, new VirtualClock());
    const w = worker(ingest, "w");
    for (const batch of fill()) w.send(batch);
    const grownSlots = w.stream.blocks.slots;
    const grownIndexBytes = index.stats().bytes!;
    expect(w.stream.blocks.size).toBe(N);
    expect(N / grownSlots).toBeGreaterThan(0.7); // growth left it near its 0.75 threshold
    expect(w.stream.selfSized).toBe(false);
    expect(ingest.reservedBlocks()).toBe(0);

    // The first eviction: the oldest block (its descendants go first in vLLM; any block will do).
    w.send([blockRemoved([engineHash(N - 1)])]);
    expect(w.stream.selfSized).toBe(true);
    expect(w.stream.reservedBlocks).toBe(N); // held just before the eviction
    expect(ingest.reservedBlocks()).toBe(N);
    expect(w.stream.blocks.slots).toBeGreaterThanOrEqual(atReservedLoad(N));
    expect(w.stream.blocks.slots).toBeGreaterThan(grownSlots);
    expect(index.stats().bytes!).toBeGreaterThanOrEqual(atReservedLoad(N) * 20); // 20-byte slots (≤ 32 workers)
    expect(index.stats().bytes!).toBeGreaterThan(grownIndexBytes);

    // Once: later evictions do not rebuild again.
    const slots = w.stream.blocks.slots;
    const bytes = index.stats().bytes!;
    for (let i = 2; i < 50; i++) w.send([blockRemoved([engineHash(N - i)])]);
    expect([w.stream.blocks.slots, index.stats().bytes!]).toEqual([slots, bytes]);

    // The index content is the same as without the rebuild: the first N − 49 blocks, nothing after.
    const m = index.findMatches(ours).get("w");
    expect(m).toEqual({ gpu: N - 49, cpu: 0, disk: 0 });
    expect(w.stream.status().blocks.blocksRemoved).toBe(49);

    // After AllBlocksCleared the map is sized again for the estimate (as for a hint).
    w.send([{ type: "AllBlocksCleared" } as KvEvent]);
    expect(w.stream.blocks.slots).toBeGreaterThanOrEqual(atReservedLoad(N));
    expect(index.findMatches(ours).size).toBe(0);
    ingest.close();
  });

  test("a hinted worker does not self-size; the engine's capacity learned later replaces a smaller estimate", () => {
    const ingest = new KvIngest(new BlockIndex(), new VirtualClock());
    const hinted = worker(ingest, "hinted", 4_000);
    const plain = worker(ingest, "plain");
    for (const batch of fill()) {
      hinted.send(batch);
      plain.send(batch);
    }
    for (const w of [hinted, plain]) w.send([blockRemoved([engineHash(N - 1)])]);
    expect([hinted.stream.selfSized, plain.stream.selfSized]).toEqual([false, true]);
    expect([hinted.stream.reservedBlocks, plain.stream.reservedBlocks]).toEqual([4_000, N]);
    expect(ingest.reservedBlocks()).toBe(4_000 + N);
    // vLLM's num_gpu_blocks from /metrics: larger than the estimate, so the tables grow to it.
    ingest.setCapacity("plain", 6_000);
    expect(plain.stream.reservedBlocks).toBe(6_000);
    expect(plain.stream.blocks.slots).toBeGreaterThanOrEqual(atReservedLoad(6_000));
    ingest.setCapacity("plain", 9_000); // stated once: later scrapes change nothing
    expect(ingest.reservedBlocks()).toBe(10_000);
    ingest.close();
  });

  test("the estimate stays within the shared budget; a bare stream sizes its own map", () => {
    const ingest = new KvIngest(new BlockIndex(), new VirtualClock(), undefined, { maxReservedBlocks: 3_000 });
    const a = worker(ingest, "a", 2_000);
    const b = worker(ingest, "b");
    for (const batch of fill()) b.send(batch);
    b.send([blockRemoved([engineHash(N - 1)])]);
    expect(b.stream.reservedBlocks).toBe(1_000); // what the budget had left
    expect(ingest.reservedBlocks()).toBe(3_000);
    expect(a.stream.selfSized).toBe(false);
    ingest.close();

    const bare = new KvEventStream("bare", new BlockIndex(), { clock: new VirtualClock(), blockSize: BS });
    let seq = 0;
    for (const batch of [...fill(), [blockRemoved([engineHash(N - 1)])]]) bare.message([new Uint8Array(0), seqFrame(BigInt(seq++)), encodeKvEventBatch({ ts: 1, events: batch }, "map")]);
    expect(bare.selfSized).toBe(true);
    expect(bare.blocks.slots).toBeGreaterThanOrEqual(atReservedLoad(N));
  });
});
