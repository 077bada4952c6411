// KvEventStream with the fast path (protocol/kv-events-fast.ts → WorkerBlockMap.storedFrom /
// removedFrom) against the same stream decoding every batch with the reference decoder: after
// every batch of a seeded run (every event shape, mutated bytes among them) both indexes hold the
// same residencies and both streams report the same counters.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { KvEventStream } from "../../src/kv/ingest.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import type { KvEvent } from "../../src/protocol/kv-events.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";
import { genBatch, mutate, newGenState } from "../protocol/kv-batch-gen.ts";

function residencies(ix: BlockIndex): string[] {
  const out: string[] = [];
  ix.forEachEntry((w, h, m) => out.push(`${w} ${h} ${m}`));
  return out.sort();
}

describe("KvEventStream fast path", () => {
  test("same index and counters as the reference decode, batch by batch", () => {
    for (const seed of [1, 2, 3]) {
      const rng = new SeededRng(seed);
      const st = newGenState();
      const clock = new VirtualClock();
      const fastIx = new BlockIndex();
      const refIx = new BlockIndex();
      const fast = new KvEventStream("w", fastIx, { clock });
      const ref = new KvEventStream("w", refIx, { clock, fastPath: false });
      for (let i = 0; i < 600; i++) {
        let payload = genBatch(rng, st, 1.7e9 + i);
        if (rng.int(6) === 0) payload = mutate(rng, payload);
        const frames = [new Uint8Array(0), seqFrame(BigInt(i)), payload];
        fast.message(frames);
        ref.message(frames);
        expect(fast.status()).toEqual(ref.status());
        if (i % 50 === 49) expect(residencies(fastIx)).toEqual(residencies(refIx));
      }
      expect(residencies(fastIx)).toEqual(residencies(refIx));
      expect(fastIx.stats()).toEqual(refIx.stats());
      // Not vacuous: blocks were stored, removed, filtered and missed on the way.
      const c = fast.status().blocks;
      expect(c.blocksStored).toBeGreaterThan(50);
      expect(c.blocksRemoved).toBeGreaterThan(10);
      expect(c.filtered + c.parentMissing + c.unknownRemovals).toBeGreaterThan(10);
    }
  });

  test("runs of BlockRemoved events (one call per run) count and apply as one event each", () => {
    const clock = new VirtualClock();
    const fastIx = new BlockIndex();
    const refIx = new BlockIndex();
    const fast = new KvEventStream("w", fastIx, { clock });
    const ref = new KvEventStream("w", refIx, { clock, fastPath: false });
    const tokens = (n: number, k: number) => Array.from({ length: 16 * n }, (_, i) => 7 * i + k);
    const rm = (h: number, medium: string | null, locality: string | null = null): KvEvent => ({ ...blockRemoved([BigInt(h)], medium), locality } as KvEvent);
    const batches: KvEvent[][] = [
      [
        blockStored({ blockHashes: [1n, 2n, 3n, 4n], parentBlockHash: null, tokenIds: tokens(4, 1), blockSize: 16 }),
        blockStored({ blockHashes: [11n, 12n, 13n, 14n], parentBlockHash: null, tokenIds: tokens(4, 2), blockSize: 16, medium: "CPU" }),
      ],
      [
        rm(1, "GPU"), rm(2, "GPU"), rm(11, "CPU"), rm(12, "CPU", "REMOTE"), rm(13, "CPU", "REMOTE"), rm(3, "TAPE"), rm(4, "TAPE"),
        rm(99, "GPU"), rm(14, "CPU"),
        blockStored({ blockHashes: [5n], parentBlockHash: 4n, tokenIds: tokens(1, 3), blockSize: 16 }),
        rm(5, "GPU"), rm(4, null), rm(13, "CPU"),
      ],
    ];
    batches.forEach((events, i) => {
      const frames = [new Uint8Array(0), seqFrame(BigInt(i)), encodeKvEventBatch({ ts: 1.7e9 + i, events }, "map")];
      fast.message(frames);
      ref.message(frames);
      expect(fast.status()).toEqual(ref.status());
      expect(residencies(fastIx)).toEqual(residencies(refIx));
    });
    const c = fast.status().blocks;
    expect(c.filtered).toBe(2); // the two REMOTE removals, one run
    expect(c.unknownMedium).toBe(2); // the two TAPE removals, one run
    expect(c.unknownRemovals).toBe(1); // 99
    expect(c.blocksRemoved).toBe(7); // 1, 2, 11, 14, 5, 4, 13
    expect(residencies(fastIx).map((r) => r.split(" ")[2]).sort()).toEqual(["cpu", "gpu"]); // 12 on CPU, 3 on GPU
    expect(fast.counters.decodeErrors + ref.counters.decodeErrors).toBe(0);
    expect(fast.blocks.size).toBe(2); // engine hashes 3 (removed on an unknown medium) and 12 (filtered)
  });
});
