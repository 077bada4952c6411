// The KV-aware cost, hand-computed, and the pick through the kv pipeline: tiers of overlap credit,
// Dynamo's worked example, the three-replica case, scraped-load correction and session hints.
import { describe, expect, test } from "bun:test";
import { creditBlocks, kvCost } from "../../src/router/cost.ts";
import { kv } from "../../src/router/policies/kv.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { SeededRng } from "../../src/core/rng.ts";
import type { LoadView } from "../../src/router/types.ts";
import type { Worker } from "../../src/workers/worker.ts";
import { req, routerConfig, worker } from "./fixtures.ts";

const knobs = { prefillLoadScale: 1, credit: { gpu: 1, cpu: 0.75, disk: 0.25 } };
const hashes = Array.from({ length: 10 }, (_, i) => BigInt(1000 + i));

function fakeLoad(byWorker: Record<string, { prefillRequests?: number; prefillTokens?: number; blocks?: number }>): LoadView {
  return {
    prefilling: (id) => ({ requests: byWorker[id]?.prefillRequests ?? 0, tokens: byWorker[id]?.prefillTokens ?? 0 }),
    activeBlocks: (id) => byWorker[id]?.blocks ?? 0,
    activeOverlaps: () => new Map(),
  };
}

function kvPolicy(index: BlockIndex, load: LoadView, over: Parameters<typeof routerConfig>[0] = {}) {
  const base = routerConfig();
  return kv.create(
    // Hand-computed cases use Dynamo's prefill_load_scale 1 (herd's default is tuned by bench/routing-quality.ts).
    routerConfig({ kv: { ...base.kv, prefill_load_scale: 1, predicted_ttl_ms: 0 }, pipeline: { ...base.pipeline, filters: [] }, ...over }),
    { kvIndex: index, load },
  );
}

const ctx = (seed = 1) => ({ rng: new SeededRng(seed), nowMs: 0, dryRun: false });

describe("cost function", () => {
  test("media are credited in tiers: each block at the credit of the medium it is served from", () => {
    // The index reports the GPU run, then the blocks the CPU tier continues with, then disk.
    expect(creditBlocks({ gpu: 4, cpu: 2, disk: 4 }, knobs.credit)).toBe(4 + 0.75 * 2 + 0.25 * 4);
    expect(creditBlocks({ gpu: 6, cpu: 0, disk: 0 }, knobs.credit)).toBe(6);
    expect(creditBlocks({ gpu: 0, cpu: 0, disk: 8 }, knobs.credit)).toBe(2);
  });

  test("a CPU tier of evicted blocks is credited as the continuation of the GPU hit (issue 25)", () => {
    // GPU still holds the prompt's start (the hot system prompt); the tier holds the evicted rest.
    const idx = new BlockIndex();
    idx.apply("A", { kind: "stored", medium: "gpu", hashes: hashes.slice(0, 4) });
    idx.apply("A", { kind: "stored", medium: "cpu", hashes: hashes.slice(4) });
    idx.apply("B", { kind: "stored", medium: "gpu", hashes: hashes.slice(0, 4) });
    const p = kvPolicy(idx, fakeLoad({})).pick(req({ promptTokens: 160, blockHashes: hashes, blockSize: 16 }), [worker("A"), worker("B")], ctx());
    const t = Object.fromEntries(p.candidates.map((c) => [c.worker, c.terms]));
    expect(t.A).toMatchObject({ overlap_gpu: 4, overlap_cpu: 6, credit_blocks: 4 + 0.75 * 6 });
    expect(t.B).toMatchObject({ overlap_gpu: 4, overlap_cpu: 0, credit_blocks: 4 });
    expect(p.chosen).toBe("A");
  });

  test.each([
    // Dynamo's design-doc example: raw prefill 10 blocks, credit 1.0.
    ["W1 overlap 2, decode 10", 2, 10, 18],
    ["W2 overlap 5, decode 5", 5, 5, 10],
    ["W3 overlap 8, decode 9", 8, 9, 11],
  ])("Dynamo's worked example: %s → %d", (_n, overlap, decode, want) => {
    const t = kvCost({ requestTokens: 160, blockSize: 16, overlap: { gpu: overlap, cpu: 0, disk: 0 }, activePrefillTokens: 0, activeBlocks: decode, newBlocks: 0 }, knobs);
    expect(t.cost).toBe(want);
  });

  test("prefill never goes negative, and prefill_load_scale weighs it", () => {
    const t = kvCost({ requestTokens: 32, blockSize: 16, overlap: { gpu: 5, cpu: 0, disk: 0 }, activePrefillTokens: 0, activeBlocks: 3, newBlocks: 2 }, { ...knobs, prefillLoadScale: 4 });
    expect(t.prefill_blocks).toBe(0);
    expect(t.cost).toBe(5);
    const u = kvCost({ requestTokens: 160, blockSize: 16, overlap: { gpu: 2, cpu: 0, disk: 0 }, activePrefillTokens: 32, activeBlocks: 1, newBlocks: 10 }, { ...knobs, prefillLoadScale: 2 });
    expect(u.raw_prefill_blocks).toBe(12);
    expect(u.cost).toBe(2 * 10 + 11);
  });
});

describe("three replicas through the kv pipeline", () => {
  // 160-token prompt = 10 blocks of 16.
  //   A  high overlap (8) but busy: 2 prompts (320 tokens) prefilling, 40 active blocks
  //      prefill = (320 + 160)/16 − 8 = 22; decode = 40 + 10 = 50; cost 72
  //   B  idle but cold: prefill = 10; decode = 0 + 10; cost 20
  //   C  overlap 6, moderate load (5 active blocks): prefill = 10 − 6 = 4; decode = 5 + 10; cost 19 ← wins
  const index = new BlockIndex();
  index.apply("A", { kind: "stored", medium: "gpu", hashes: hashes.slice(0, 8) });
  index.apply("C", { kind: "stored", medium: "gpu", hashes: hashes.slice(0, 6) });
  const load = fakeLoad({ A: { prefillRequests: 2, prefillTokens: 320, blocks: 40 }, C: { blocks: 5 } });
  const ws = [worker("A", { load: { in_flight: 2 } }), worker("B"), worker("C", { load: { in_flight: 1 } })];

  test("the third wins, and every term is explained", () => {
    const p = kvPolicy(index, load).pick(req({ promptTokens: 160, blockHashes: hashes, blockSize: 16 }), ws, ctx());
    expect(p.chosen).toBe("C");
    const t = Object.fromEntries(p.candidates.map((c) => [c.worker, c.terms]));
    expect(t.A).toMatchObject({ overlap_gpu: 8, active_prefill_tokens: 320, raw_prefill_blocks: 30, prefill_blocks: 22, decode_blocks: 50, kv_cost: 72, cost: 72 });
    expect(t.B).toMatchObject({ overlap_gpu: 0, prefill_blocks: 10, decode_blocks: 10, cost: 20 });
    expect(t.C).toMatchObject({ overlap_gpu: 6, credit_blocks: 6, prefill_blocks: 4, decode_blocks: 15, cost: 19 });
    expect(p.predictedCachedTokens).toBe(96);
    expect(p.request).toEqual({ tokens: 160, block_size: 16, hashed_blocks: 10, request_blocks: 10 });
    expect(p.reason).toContain("lowest cost 19");
    expect(Object.keys(p.timings!)).toEqual(["match_ms", "score_ms"]);
  });

  test("a larger prefill_load_scale makes cache count more: A (prefill 22) still loses, B (prefill 10) loses more", () => {
    const base = routerConfig();
    const p = kvPolicy(index, load, { kv: { ...base.kv, prefill_load_scale: 3, predicted_ttl_ms: 0 } }).pick(
      req({ promptTokens: 160, blockHashes: hashes, blockSize: 16 }), ws, ctx());
    const cost = Object.fromEntries(p.candidates.map((c) => [c.worker, c.terms.cost]));
    expect(cost).toEqual({ A: 3 * 22 + 50, B: 3 * 10 + 10, C: 3 * 4 + 15 });
    expect(p.chosen).toBe("C");
  });

  test("CPU and disk overlap earn partial credit", () => {
    const idx = new BlockIndex();
    idx.apply("A", { kind: "stored", medium: "cpu", hashes }); // 10 blocks on CPU: credit 7.5
    idx.apply("B", { kind: "stored", medium: "disk", hashes }); // 10 blocks on disk: credit 2.5
    const p = kvPolicy(idx, fakeLoad({})).pick(req({ promptTokens: 160, blockHashes: hashes, blockSize: 16 }), [worker("A"), worker("B")], ctx());
    const t = Object.fromEntries(p.candidates.map((c) => [c.worker, c.terms]));
    expect(t.A).toMatchObject({ overlap_cpu: 10, credit_blocks: 7.5, cost: 2.5 + 10 });
    expect(t.B).toMatchObject({ overlap_disk: 10, credit_blocks: 2.5, cost: 7.5 + 10 });
    expect(p.chosen).toBe("A");
  });

  test("scraped load beyond herd's own bookings counts as requests of this size", () => {
    // running 5 + waiting 3 with nothing booked by herd: 8 outside requests, 3 of them waiting.
    const p = kvPolicy(new BlockIndex(), fakeLoad({})).pick(
      req({ promptTokens: 160, blockHashes: hashes, blockSize: 16 }),
      [worker("busy", { load: { running: 5, waiting: 3 } }), worker("idle", { load: { running: 0, waiting: 0 } })],
      ctx(),
    );
    const t = Object.fromEntries(p.candidates.map((c) => [c.worker, c.terms]));
    // prefill = (3·160 + 160)/16 = 40; decode = 8·10 + 10 = 90
    expect(t.busy).toMatchObject({ outside_requests: 8, active_prefill_tokens: 480, prefill_blocks: 40, decode_blocks: 90, cost: 130 });
    expect(t.idle).toMatchObject({ outside_requests: 0, cost: 20 });
    expect(p.chosen).toBe("idle");
  });
});

describe("session hints", () => {
  // Session scorer weight 0.5 on a 10-block request: the session's worker keeps the request unless
  // its cost exceeds the best by more than 5 blocks.
  const ws = (): Worker[] => [worker("S"), worker("O")];
  test.each([
    [4, "S"],
    [6, "O"],
  ])("session worker %d blocks more expensive → %s", (extraBlocks, want) => {
    const load = fakeLoad({ S: { blocks: extraBlocks } });
    const policy = kvPolicy(new BlockIndex(), load);
    // Bind the session to S: first request with S as the only candidate.
    policy.pick(req({ sessionId: "chat-1", promptTokens: 160, blockHashes: hashes, blockSize: 16 }), [worker("S")], ctx());
    const p = policy.pick(req({ sessionId: "chat-1", promptTokens: 160, blockHashes: hashes, blockSize: 16 }), ws(), ctx());
    expect(p.chosen).toBe(want);
    const s = p.candidates.find((c) => c.worker === "S")!.terms;
    expect(s).toMatchObject({ session_worker: 1, session_weighted: -5, cost: 20 + extraBlocks - 5 });
  });

  test("a dry run binds no session", () => {
    const policy = kvPolicy(new BlockIndex(), fakeLoad({ S: { blocks: 4 } }));
    policy.pick(req({ sessionId: "x", promptTokens: 160 }), [worker("S")], { ...ctx(), dryRun: true });
    const p = policy.pick(req({ sessionId: "x", promptTokens: 160 }), [worker("S"), worker("O")], ctx());
    expect(p.chosen).toBe("O");
  });
});
