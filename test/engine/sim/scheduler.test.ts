import { describe, expect, test } from "bun:test";
import { ZERO_COST, DEFAULT_COST, stepCostMs } from "../../../src/engine/sim/cost.ts";
import { harness, seq } from "./helpers.ts";

describe("SimScheduler", () => {
  test("generates max_tokens tokens, then finishes with length and frees every block", () => {
    const h = harness();
    const t = h.submit("a", seq(1, 10), 5);
    h.run();
    expect(t.tokens.length).toBe(5);
    expect(t.finish).toMatchObject({ reason: "length", promptTokens: 10, outputTokens: 5, cachedTokens: 0 });
    expect(h.s.stats()).toMatchObject({ running: 0, waiting: 0, kvUsage: 0, generationTokens: 5, promptTokens: 10 });
    expect(h.s.idle).toBe(true);
  });

  test("EOS finishes with stop; a handler asking to stop finishes with stop", () => {
    const h = harness();
    const a = h.submit("a", seq(1, 8), 50, { eosAt: 3 });
    const b = h.submit("b", seq(100, 8), 50, { stopAt: 1 });
    h.run();
    expect(a.finish).toMatchObject({ reason: "stop", outputTokens: 4 });
    expect(b.finish).toMatchObject({ reason: "stop", outputTokens: 2 });
  });

  test("a repeated prefix hits the cache in whole blocks, leaving at least one token to compute", () => {
    const h = harness();
    h.submit("a", seq(1, 18), 1);
    h.run();
    // Same 18-token prompt: 4 full blocks (16 tokens) are cached; 17 would leave the prompt fully cached.
    const b = h.submit("b", seq(1, 18), 1);
    h.run();
    expect(b.finish?.cachedTokens).toBe(16);
    // Exactly block-aligned prompt of 16: only 3 blocks may hit (one token must be computed).
    const c = h.submit("c", seq(1, 16), 1);
    h.run();
    expect(c.finish?.cachedTokens).toBe(12);
    const st = h.s.stats();
    expect(st.prefixQueries).toBe(18 + 18 + 16);
    expect(st.prefixHits).toBe(16 + 12);
  });

  test("a cache hit makes the first token faster", () => {
    const h = harness({ maxNumBatchedTokens: 8192, blockSize: 16, numBlocks: 2000, maxModelLen: 16384 });
    const a = h.submit("a", seq(1, 8000), 1);
    h.run();
    const b = h.submit("b", seq(1, 8000), 1);
    const startB = h.clock.now();
    h.run();
    const ttftA = a.finish!.firstTokenMs! - a.finish!.arrivalMs;
    const ttftB = b.finish!.firstTokenMs! - startB;
    expect(ttftB).toBeLessThan(ttftA / 3);
  });

  test("free cached blocks are evicted least recently freed first, with BlockRemoved events", () => {
    // 8 blocks of 4 tokens. Two requests with 8-token prompts hold 2 blocks each (the one sampled token
    // is never computed), then free them tail first: free queue = [4 5 6 7 | old1 old0 | new1 new0].
    const h = harness({ numBlocks: 8 });
    h.submit("old", seq(1, 8), 1);
    h.run();
    h.submit("new", seq(50, 8), 1);
    h.run();
    const stored = h.events.flat().filter((e) => e.type === "BlockStored");
    const oldHashes = stored[0]!.type === "BlockStored" ? stored[0]!.blockHashes : [];
    const newHashes = stored[1]!.type === "BlockStored" ? stored[1]!.blockHashes : [];
    expect(oldHashes.length).toBe(2);
    h.events.length = 0;
    // 25 tokens need 7 blocks: the 4 never-used ones, then old's two, then new's tail block.
    h.submit("big", seq(200, 25), 1);
    h.run();
    const removed = h.events.flat().filter((e) => e.type === "BlockRemoved").flatMap((e) => (e.type === "BlockRemoved" ? e.blockHashes : []));
    expect(removed).toEqual([oldHashes[1]!, oldHashes[0]!, newHashes[1]!]);
    // "old" is gone from the cache, so its prompt misses again.
    const again = h.submit("old2", seq(1, 8), 1);
    h.run();
    expect(again.finish?.cachedTokens).toBe(0);
  });

  test("BlockStored carries the chain: parent hash, concatenated token ids, block size", () => {
    const h = harness();
    h.submit("a", seq(1, 12), 1);
    h.run();
    h.submit("b", [...seq(1, 8), ...seq(90, 8)], 1);
    h.run();
    const stored = h.events.flat().filter((e) => e.type === "BlockStored");
    expect(stored[0]).toMatchObject({ parentBlockHash: null, tokenIds: seq(1, 12), blockSize: 4 });
    const first = stored[0]!.type === "BlockStored" ? stored[0]!.blockHashes : [];
    // b shares the first two blocks: its new blocks chain from a's second block.
    expect(stored[1]).toMatchObject({ parentBlockHash: first[1], tokenIds: seq(90, 8) });
  });

  test("requests wait when KV blocks run out and run when blocks are freed", () => {
    // 8 blocks × 4 tokens; a 20-token prompt takes 5 blocks, so the second request must wait.
    const h = harness({ numBlocks: 8, maxModelLen: 32 });
    const a = h.submit("a", seq(1, 20), 4);
    const b = h.submit("b", seq(500, 20), 4);
    h.clock.advance(DEFAULT_COST.requestMs + 1); // both arrived, one step started
    expect(h.s.stats()).toMatchObject({ running: 1, waiting: 1 });
    h.run();
    expect(a.finish?.reason).toBe("length");
    expect(b.finish?.reason).toBe("length");
    expect(b.finish!.scheduledMs!).toBeGreaterThanOrEqual(a.finish!.finishMs);
  });

  test("the waiting queue is bounded: beyond it requests are refused with 503", () => {
    const h = harness({ maxWaiting: 2 });
    h.submit("a", seq(1, 4), 1);
    h.submit("b", seq(1, 4), 1);
    expect(() => h.submit("c", seq(1, 4), 1)).toThrow(expect.objectContaining({ status: 503 }));
  });

  test("too long a request is a 400 naming the context length", () => {
    const h = harness({ maxModelLen: 32 });
    expect(() => h.submit("a", seq(1, 30), 5)).toThrow(/maximum context length is 32 tokens/);
    expect(() => h.submit("b", [], 5)).toThrow(expect.objectContaining({ status: 400 }));
  });

  test("chunked prefill: a step computes at most max_num_batched_tokens", () => {
    const h = harness({ maxNumBatchedTokens: 16, blockSize: 4, numBlocks: 64, cost: { ...ZERO_COST, stepMs: 1 } });
    const t = h.submit("a", seq(1, 50), 1);
    h.run();
    // ceil(50 / 16) = 4 prefill steps, the last one samples the first token.
    expect(h.s.stats().steps).toBe(4);
    expect(t.finish?.firstTokenMs).toBe(4);
    // Two requests share a budget: 16 tokens per step in all.
    const h2 = harness({ maxNumBatchedTokens: 16, cost: { ...ZERO_COST, stepMs: 1 } });
    h2.submit("x", seq(1, 20), 1);
    h2.submit("y", seq(100, 20), 1);
    h2.run();
    expect(h2.s.stats().steps).toBe(3); // 40 tokens / 16 per step
  });

  test("abort frees blocks at once, also in the middle of a step", () => {
    const h = harness();
    const t = h.submit("a", seq(1, 40), 100);
    h.clock.advance(50);
    expect(h.s.stats().kvUsage).toBeGreaterThan(0);
    h.s.abort("a");
    expect(h.s.stats()).toMatchObject({ running: 0, kvUsage: 0 });
    expect(t.finish?.reason).toBe("abort");
    h.run();
    expect(h.s.idle).toBe(true);
    // Aborting while still arriving (API-server time) never queues it.
    const u = h.submit("b", seq(1, 4), 3);
    h.s.abort("b");
    h.run();
    expect(u.tokens.length).toBe(0);
    expect(u.finish?.reason).toBe("abort");
  });

  test("decode step cost grows with batch size and context", () => {
    const itl = (batch: number, prompt: number) => {
      const h = harness({ blockSize: 16, numBlocks: 30000, maxNumSeqs: 1024, maxNumBatchedTokens: 1 << 20, maxModelLen: 40960 });
      const ts = Array.from({ length: batch }, (_, i) => h.submit(`r${i}`, seq(i * 100000, prompt), 10));
      h.run();
      const t = ts[0]!.tokens;
      return (t.at(-1)!.at - t[1]!.at) / (t.length - 2);
    };
    const b1 = itl(1, 1000);
    const b64 = itl(64, 1000);
    const b8long = itl(8, 8000);
    expect(b1).toBeCloseTo(7.45, 1); // 1.5 + 5.9 + 5.3e-5 × 1000
    expect(b64).toBeGreaterThan(b1 * 1.3);
    expect(b8long).toBeGreaterThan(itl(8, 1000) * 1.2);
  });

  test("time scale divides every duration", () => {
    const ttft = (timeScale: number) => {
      const h = harness({ timeScale });
      const t = h.submit("a", seq(1, 40), 2);
      h.run();
      return t.finish!.firstTokenMs! - t.finish!.arrivalMs;
    };
    expect(ttft(20)).toBeCloseTo(ttft(1) / 20, 6);
  });

  test("preemption under KV pressure still completes every request", () => {
    // 12 blocks of 4; three requests each growing to 4 + 30 = 34 tokens (9 blocks) cannot all fit.
    const h = harness({ numBlocks: 12, maxModelLen: 48 });
    const ts = [0, 1, 2].map((i) => h.submit(`r${i}`, seq(i * 100, 4), 30));
    h.run();
    for (const t of ts) expect(t.finish).toMatchObject({ reason: "length", outputTokens: 30 });
    expect(h.s.stats().preemptions).toBeGreaterThan(0);
    expect(h.s.stats().kvUsage).toBe(0);
  });

  test("reset of the prefix cache emits AllBlocksCleared and drops hits", () => {
    const h = harness();
    h.submit("a", seq(1, 12), 1);
    h.run();
    expect(h.s.resetPrefixCache()).toBe(true);
    expect(h.events.flat().at(-1)).toEqual({ type: "AllBlocksCleared" });
    const b = h.submit("b", seq(1, 12), 1);
    h.run();
    expect(b.finish?.cachedTokens).toBe(0);
  });

  test("the cost model reproduces the derived figures (docs/references.md#timing-B.4)", () => {
    // docs/references.md#timing-B.4: batch 1 at 1k context ≈ 7.5 ms; batch 8 at 8k ≈ 10.9 ms; batch 256 at 1k ≈ 21.3 ms.
    expect(stepCostMs(DEFAULT_COST, { tokens: 1, prefillPairs: 0, decodeContextTokens: 1000 })).toBeCloseTo(7.45, 2);
    expect(stepCostMs(DEFAULT_COST, { tokens: 8, prefillPairs: 0, decodeContextTokens: 8 * 8000 })).toBeCloseTo(10.79, 1);
    expect(stepCostMs(DEFAULT_COST, { tokens: 256, prefillPairs: 0, decodeContextTokens: 256 * 1000 })).toBeCloseTo(21.0, 0);
  });
});

describe("timing against the derived curves (docs/references.md#timing-B.4)", () => {
  const ttft = (prompt: number) => {
    const h = harness({ blockSize: 16, numBlocks: 30000, maxNumBatchedTokens: 8192, maxModelLen: 40960 });
    const t = h.submit("a", seq(1, prompt), 1);
    h.run();
    return t.finish!.firstTokenMs! - t.finish!.arrivalMs;
  };
  test("an idle engine's TTFT: ≈116 ms at 4k tokens, ≈1.41 s at 32k (chunked in 8192s)", () => {
    expect(ttft(4096)).toBeCloseTo(116, -1);
    expect(Math.abs(ttft(32768) - 1410) / 1410).toBeLessThan(0.05);
  });
});

test("a handler that throws aborts only its own request", () => {
  const h = harness();
  const good = h.submit("good", seq(1, 8), 3);
  h.s.submit({
    id: "bad", promptTokens: seq(50, 8), maxTokens: 3, ignoreEos: false,
    nextToken: () => ({ id: 9, eos: false }),
    handlers: { onToken: () => { throw new Error("consumer bug"); }, onFinish: () => { throw new Error("again"); } },
  });
  h.run();
  expect(good.finish?.reason).toBe("length");
  expect(h.s.stats()).toMatchObject({ running: 0, kvUsage: 0 });
  expect(h.s.idle).toBe(true);
});
