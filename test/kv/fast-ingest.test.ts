// KvEventStream with the fast path (protocol/kv-events-fast.ts → WorkerBlockMap.storedFrom /
// removedFrom) against the same stream decoding every batch with the reference decoder: after
// every batch of a seeded run (every event shape, mutated bytes among them) both indexes hold the
// same residencies and both streams report the same counters.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { KvEventStream } from "../../src/kv/ingest.ts";
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
});
