// The scheduler's side of KV offload (sim --kv-offload-url) on a virtual clock, against an in-memory
// tier: evicted prompt blocks are handed over under herd's hashes, a prefix miss asks the tier for
// the blocks after the GPU hit, loaded blocks count as cached and enter the prefix cache, and the
// load time (not the prefill) is what the request waits for.
import { expect, test } from "bun:test";
import { blockHashes } from "../../../src/kv/hash.ts";
import type { SchedulerOffload } from "../../../src/engine/sim/scheduler.ts";
import { loadMs } from "../../../src/engine/sim/offload.ts";
import { harness, seq } from "./helpers.ts";

/** A tier in a Map; lookups answer after `delayMs` of virtual time. */
function fakeTier(clock: { setTimer(ms: number, fn: () => void): unknown }, delayMs = 0) {
  const held = new Map<bigint, bigint>(); // herd → engine hash
  const asked: { from: number; n: number }[] = [];
  const tier: SchedulerOffload = {
    offloadEvicted: (engine, herd) => void held.set(herd, engine),
    lookup: (herd, from, done) => {
      let n = 0;
      while (from + n < herd.length && held.has(herd[from + n]!)) n++;
      asked.push({ from, n });
      clock.setTimer(delayMs, () => done(n));
    },
  };
  return { tier, held, asked };
}

// 4-token blocks, 8 blocks of GPU KV: a 25-token prompt (6 full blocks + 1 token) plus its one
// output token fills 7 blocks, so a second such prompt evicts most of the first.
const A = seq(100, 25);
const B = seq(500, 25);

test("without a tier, a prompt evicted from the GPU is recomputed (1 cached block)", () => {
  const h = harness({ numBlocks: 8, blockSize: 4 });
  h.submit("a1", A, 1);
  h.run();
  h.submit("b", B, 1);
  h.run();
  const t = h.submit("a2", A, 1);
  h.run();
  expect(t.finish!.cachedTokens).toBe(4);
});

test("evicted prompt blocks go to the tier under herd's hashes; the same prompt loads them back as cached", () => {
  const h = harness({ numBlocks: 8, blockSize: 4 });
  const f = fakeTier(h.clock, 3);
  h.s.attachOffload(f.tier);
  h.submit("a1", A, 1);
  h.run();
  expect(f.held.size).toBe(0); // nothing evicted yet
  h.submit("b", B, 1);
  h.run();
  const herdA = blockHashes(A, 4);
  // The free queue held A's blocks tail first: B's 7 allocations evicted A's blocks 1..5 (block 6 was partial).
  expect([...f.held.keys()].sort()).toEqual(herdA.slice(1, 6).sort());
  const t = h.submit("a2", A, 1);
  h.run();
  expect(f.asked.at(-1)).toEqual({ from: 1, n: 5 }); // GPU hit 1 block, the tier has the next 5
  expect(t.finish!.cachedTokens).toBe(24); // 6 blocks: 1 on the GPU + 5 loaded
  // The loaded blocks entered the prefix cache: BlockStored (GPU) events for them.
  const last = h.events.at(-1)!.concat(h.events.at(-2)!).find((e) => e.type === "BlockStored");
  expect(last !== undefined && last.type === "BlockStored" && last.medium === undefined && last.blockHashes.length >= 5).toBe(true);
  // A third request of A finds all of it on the GPU and does not ask the tier.
  const asked = f.asked.length;
  const t3 = h.submit("a3", A, 1);
  h.run();
  expect(t3.finish!.cachedTokens).toBe(24);
  expect(f.asked.length).toBe(asked);
});

test("the lookup's time is what the request waits: TTFT with the tier < TTFT recomputing, by the prefill saved", () => {
  const ttft = (withTier: boolean) => {
    const h = harness({ numBlocks: 64, blockSize: 16, maxNumBatchedTokens: 8192 });
    const f = fakeTier(h.clock, loadMs({ bytesPerBlock: 2.25 * 2 ** 20, loadGbPerS: 25, timeScale: 1 }, 1));
    if (withTier) h.s.attachOffload(f.tier);
    const long = seq(1000, 16 * 60 + 5);
    h.submit("x", long, 1);
    h.run();
    h.submit("y", seq(9000, 16 * 60 + 5), 1); // evicts most of x
    h.run();
    const t = h.submit("x2", long, 1);
    h.run();
    return { ms: t.finish!.firstTokenMs! - t.finish!.arrivalMs, cached: t.finish!.cachedTokens };
  };
  const off = ttft(false);
  const on = ttft(true);
  expect(on.cached).toBeGreaterThan(off.cached);
  expect(on.ms).toBeLessThan(off.ms);
});

test("a request aborted while its lookup is pending never runs; the waiting count returns to 0", () => {
  const h = harness({ numBlocks: 8, blockSize: 4 });
  const f = fakeTier(h.clock, 50);
  h.s.attachOffload(f.tier);
  h.submit("a1", A, 1);
  h.run();
  h.submit("b", B, 1);
  h.run();
  const t = h.submit("a2", A, 1);
  h.clock.advance(20); // past the API-server time, inside the lookup
  expect(h.s.stats().waiting).toBe(1);
  h.s.abort("a2");
  h.run();
  expect(t.finish!.reason).toBe("abort");
  expect(t.tokens.length).toBe(0);
  expect(h.s.stats().waiting).toBe(0);
  expect(h.s.idle).toBe(true);
});
