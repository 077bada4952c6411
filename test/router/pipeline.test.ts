// The pipeline's pieces: the temperature picker's distribution, the overload guard, a filter that
// would empty the set, a pipeline composed in YAML, predicted overlap in `kv`, and the prefix
// memory's TTL and capacity behind the `prefix` policy.
import { describe, expect, test } from "bun:test";
import { pickByCost, softmaxWeights } from "../../src/router/cost.ts";
import { overloadFilter } from "../../src/router/pipeline/filters.ts";
import { PrefixMemory } from "../../src/router/prefix-memory.ts";
import { prefix } from "../../src/router/policies/prefix.ts";
import { Router } from "../../src/router/router.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { VirtualClock } from "../../src/core/clock.ts";
import { parseConfigText, renderFindings } from "../../src/config/index.ts";
import type { RequestFacts } from "../../src/router/pipeline/types.ts";
import { registryWith, req, routerConfig, worker } from "./fixtures.ts";

const env = { hostname: "h", dataDir: "/tmp/herd-test" };
const H = (n: number, base = 0) => Array.from({ length: n }, (_, i) => BigInt(base + i + 1));

/** Pearson's chi-square statistic of observed counts against expected probabilities. */
function chiSquare(counts: number[], p: number[]): number {
  const n = counts.reduce((a, b) => a + b, 0);
  return counts.reduce((s, c, i) => s + (c - n * p[i]!) ** 2 / (n * p[i]!), 0);
}

function draw(costs: number[], t: number, n: number, seed: number): number[] {
  const rng = new SeededRng(seed);
  const counts = costs.map(() => 0);
  for (let i = 0; i < n; i++) counts[pickByCost(costs, t, rng)]!++;
  return counts;
}

describe("temperature", () => {
  test("T > 0: softmax over min-max normalised cost (Dynamo), sampled with the seeded rng", () => {
    const p = softmaxWeights([10, 20, 30], 1);
    const z = 1 + Math.exp(-0.5) + Math.exp(-1);
    expect(p[0]).toBeCloseTo(1 / z, 12);
    expect(p[1]).toBeCloseTo(Math.exp(-0.5) / z, 12);
    expect(p[2]).toBeCloseTo(Math.exp(-1) / z, 12);
    // Normalisation: scaling and shifting costs changes nothing.
    expect(softmaxWeights([110, 210, 310], 1)).toEqual(softmaxWeights([10, 20, 30], 1));
    // χ² with 2 degrees of freedom: 13.8 is the 0.1 % critical value.
    for (const seed of [1, 2, 3]) expect(chiSquare(draw([10, 20, 30], 1, 20_000, seed), p)).toBeLessThan(13.8);
    // A wrong distribution is rejected by the same test (it can fail).
    expect(chiSquare(draw([10, 20, 30], 1, 20_000, 1), [1 / 3, 1 / 3, 1 / 3])).toBeGreaterThan(13.8);
  });

  test("lower temperature concentrates on the cheapest; equal costs are uniform", () => {
    const hot = draw([10, 20, 30], 5, 10_000, 4);
    const cold = draw([10, 20, 30], 0.1, 10_000, 4);
    expect(cold[0]!).toBeGreaterThan(hot[0]!);
    expect(cold[0]! / 10_000).toBeGreaterThan(0.99);
    expect(chiSquare(draw([7, 7, 7, 7], 1, 20_000, 5), [0.25, 0.25, 0.25, 0.25])).toBeLessThan(16.3);
  });

  test("T = 0: always the cheapest, exact ties uniformly at random", () => {
    expect(draw([5, 3, 9], 0, 1000, 6)).toEqual([0, 1000, 0]);
    const ties = draw([3, 9, 3, 3], 0, 30_000, 7);
    expect(ties[1]).toBe(0);
    expect(chiSquare([ties[0]!, ties[2]!, ties[3]!], [1 / 3, 1 / 3, 1 / 3])).toBeLessThan(13.8);
  });
});

describe("overload guard (SGLang's absolute + relative thresholds)", () => {
  const facts = {} as RequestFacts;
  const guard = overloadFilter({ abs_threshold: 32, rel_threshold: 1.5 });
  const keep = (loads: number[]) => [...guard.keep(loads.map((l, i) => worker(`w${i}`, { load: { in_flight: l } })), facts)].sort();
  test.each([
    [[0, 10, 40, 33], ["w0", "w1"]], // 40 and 33 are > 0 + 32 and > 1.5 × 0
    [[40, 60, 80], ["w0", "w1"]], // 80 − 40 > 32 and 80 > 60
    [[100, 140], ["w0", "w1"]], // 40 over, but 140 < 1.5 × 100: not imbalanced
    [[5, 5, 5], ["w0", "w1", "w2"]],
  ])("loads %j keep %j", (loads, want) => expect(keep(loads)).toEqual(want));

  test("load is max(in_flight, running + waiting)", () => {
    const ws = [worker("a", { load: { in_flight: 1, running: 50, waiting: 10 } }), worker("b", { load: { in_flight: 2 } })];
    expect([...guard.keep(ws, facts)]).toEqual(["b"]);
  });

  test("a hot worker holding the prefix is skipped for a cold one under the guard", () => {
    const index = new BlockIndex();
    const hashes = H(100);
    index.apply("hot", { kind: "stored", medium: "gpu", hashes });
    const registry = registryWith([worker("hot", { load: { running: 60, waiting: 0 } }), worker("cold", { load: { running: 2, waiting: 0 } })]);
    const router = new Router({ config: routerConfig({ policy: "kv" }), registry, clock: new VirtualClock(), rng: new SeededRng(1), kvIndex: index });
    const { decision } = router.route(req({ promptTokens: 1600, blockHashes: hashes, blockSize: 16 }));
    expect(decision.chosen).toBe("cold");
    expect(decision.candidates.find((c) => c.worker === "hot")!.terms.filtered_by).toBe("overload");
  });
});

describe("pipeline from YAML", () => {
  const yaml = `router:
  policy: kv
  kv: { temperature: 0 }
  pipeline:
    filters: [healthy, role, overload]
    overload: { abs_threshold: 4, rel_threshold: 1.1 }
    scorers:
      - { type: load, weight: 2 }
      - { type: kv-cost, weight: 0 }
    picker: min
`;
  test("parses, builds, and routes by the composed scorers", () => {
    const r = parseConfigText(yaml, "herd.yaml", env);
    expect(renderFindings(r.findings, "herd.yaml")).toBe("");
    const cfg = r.config!.router;
    expect(cfg.pipeline.scorers).toEqual([{ type: "load", weight: 2 }, { type: "kv-cost", weight: 0 }]);
    const registry = registryWith([
      worker("a", { load: { running: 3, waiting: 0 } }), // (the registry owns in_flight)
      worker("b", { load: { running: 1, waiting: 0 } }),
      worker("c", { load: { running: 9, waiting: 0 } }),
    ]);
    const router = new Router({ config: cfg, registry, clock: new VirtualClock(), rng: new SeededRng(2) });
    const { decision } = router.route(req({ promptTokens: 64 }));
    expect(decision.policy).toBe("kv");
    expect(decision.chosen).toBe("b");
    const terms = Object.fromEntries(decision.candidates.map((c) => [c.worker, c.terms]));
    expect(terms.a).toMatchObject({ load: 3, load_weighted: 6, "kv-cost_weighted": 0, cost: 6 });
    expect(terms.c!.filtered_by).toBe("overload"); // 9 − 1 > 4 and 9 > 1.1
  });

  test("a filter that would drop every worker is skipped, not a 503", () => {
    const cfg = parseConfigText("router: { policy: prefix, pipeline: { filters: [role] } }", "x.yaml", env).config!.router;
    const router = new Router({ config: cfg, registry: registryWith([worker("p", { role: "aggregated" })]), clock: new VirtualClock(), filters: [] });
    const decode = new Router({ config: cfg, registry: registryWith([worker("d", { role: "decode" })]), clock: new VirtualClock(), filters: [] });
    expect(router.route(req()).decision.chosen).toBe("p");
    const d = decode.route(req()).decision;
    expect(d.chosen).toBe("d");
    expect(d.reason).toContain("filter role skipped");
  });

  test("mistakes name their path and suggest the fix", () => {
    const r = parseConfigText("router:\n  pipeline:\n    scorers: [{ type: kvcost }]\n    picker: max\n", "x.yaml", env);
    const text = renderFindings(r.findings, "x.yaml");
    expect(text).toContain('router.pipeline.scorers[0].type: expected one of kv-cost | load | session | decode-load | overlap | prefix-share | queue | kv-utilization | no-hit-lru, got "kvcost" (did you mean "kv-cost"?)');
    expect(text).toContain("router.pipeline.picker");
  });
});

describe("predicted overlap (kv) and remembered overlap (prefix)", () => {
  const run = (policy: "kv" | "prefix", over: Parameters<typeof routerConfig>[0] = {}) => {
    const registry = registryWith([worker("a"), worker("b"), worker("c")]);
    const router = new Router({ config: routerConfig({ policy, ...over }), registry, clock: new VirtualClock(), rng: new SeededRng(3) });
    return Array.from({ length: 20 }, () => router.route(req({ promptTokens: 320, blockHashes: H(20), blockSize: 16 })).worker.id);
  };
  test("kv: without events a repeated new prefix sticks to its first worker through predictions", () => {
    expect(new Set(run("kv")).size).toBe(1);
    const base = routerConfig();
    expect(new Set(run("kv", { kv: { ...base.kv, predicted_ttl_ms: 0 } })).size).toBeGreaterThan(1);
  });
  test("prefix: the router's own history gives the same affinity", () => {
    expect(new Set(run("prefix")).size).toBe(1);
  });
  test("prefix policy forgets after the TTL", () => {
    const clock = new VirtualClock();
    const base = routerConfig();
    const router = new Router({ config: routerConfig({ policy: "prefix", prefix: { ...base.prefix, ttl_ms: 1000 } }), registry: registryWith([worker("a"), worker("b")]), clock, rng: new SeededRng(4) });
    const r = () => router.route(req({ promptTokens: 160, blockHashes: H(10), blockSize: 16 })).decision;
    const first = r().chosen;
    clock.advance(999);
    expect(r().candidates.find((c) => c.worker === first)!.terms.overlap_gpu).toBe(10);
    clock.advance(2000);
    expect(r().candidates.every((c) => c.terms.overlap_gpu === 0)).toBe(true);
  });
});

test("prefix forgets a worker whose engine restarted (its cache is empty)", () => {
  const registry = registryWith([worker("a"), worker("b")]);
  const router = new Router({ config: routerConfig({ policy: "prefix" }), registry, clock: new VirtualClock(), rng: new SeededRng(6) });
  const r = () => router.explain(req({ promptTokens: 160, blockHashes: H(10), blockSize: 16 })).decision;
  const first = router.route(req({ promptTokens: 160, blockHashes: H(10), blockSize: 16 })).worker;
  expect(r().candidates.find((c) => c.worker === first.id)!.terms.overlap_gpu).toBe(10);
  registry.upsert({ ...first, restarts: first.restarts + 1 });
  expect(r().candidates.every((c) => c.terms.overlap_gpu === 0)).toBe(true);
});

describe("PrefixMemory", () => {
  test("TTL runs from the last send; a shallower refresh outlives the deeper blocks", () => {
    const m = new PrefixMemory(1000, 100);
    const [a, b, c] = H(3);
    m.record("w", [a!, b!, c!], 0);
    m.record("w", [a!, b!], 500);
    expect(m.overlaps([a!, b!, c!], 999).get("w")).toBe(3);
    expect(m.overlaps([a!, b!, c!], 1200).get("w")).toBe(2);
    // Expiries round up to 1/64 of the TTL (16 ms here): gone by 1500 + 16.
    expect(m.overlaps([a!, b!, c!], 1516).has("w")).toBe(false);
  });

  test("capacity per worker: least recently sent forgotten first, a prompt's tail before its head", () => {
    const m = new PrefixMemory(1e9, 4);
    const p1 = H(3, 0);
    const p2 = H(3, 100);
    m.record("w", p1, 0);
    m.record("w", p2, 1);
    expect(m.size("w")).toBe(4);
    expect(m.overlaps(p1, 2).get("w")).toBe(1); // p1's head survives, its tail went first
    expect(m.overlaps(p2, 2).get("w")).toBe(3);
    m.record("v", H(10, 500), 0); // longer than the capacity: its first 4 blocks are kept
    expect(m.size("v")).toBe(4);
    expect(m.overlaps(H(10, 500), 1).get("v")).toBe(4);
  });

  test("workers are independent, and forget() drops one at once", () => {
    const m = new PrefixMemory(1e9, 10);
    m.record("a", H(5), 0);
    m.record("b", H(2), 0);
    expect(Object.fromEntries(m.overlaps(H(5), 1))).toEqual({ a: 5, b: 2 });
    m.forget("a");
    expect(Object.fromEntries(m.overlaps(H(5), 1))).toEqual({ b: 2 });
  });

  test("re-sending within one TTL slice keeps the order; a later send refreshes only what it must", () => {
    const m = new PrefixMemory(6400, 100); // slice 100 ms
    const p = H(6);
    m.record("w", p, 10); // all 6 live until 6500
    m.record("w", p.slice(0, 3), 50); // same slice (6450 → 6500): nothing changes
    m.record("w", p.slice(0, 2), 250); // new slice: blocks 0-1 now live until 6700
    expect(m.overlaps(p, 6499).get("w")).toBe(6);
    expect(m.overlaps(p, 6550).get("w")).toBe(2);
    expect(m.overlaps(p, 6700).has("w")).toBe(false);
  });

  test("memory stays bounded under many distinct prompts", () => {
    const m = new PrefixMemory(60_000, 1000);
    for (let i = 0; i < 500; i++) m.record("w", H(20, i * 1000), i);
    expect(m.size("w")).toBe(1000);
    expect(prefix.name).toBe("prefix");
  });
});

describe("leases carry the prompt's blocks", () => {
  test("a shared prefix counts once per worker; release frees it; first token clears prefill only", () => {
    const registry = registryWith([worker("a")]);
    const router = new Router({ config: routerConfig({ policy: "kv" }), registry, clock: new VirtualClock() });
    const shared = H(8);
    const one = router.routeAndBook(req({ promptTokens: 8 * 16 + 5, blockHashes: shared, blockSize: 16 }));
    const two = router.routeAndBook(req({ promptTokens: 10 * 16, blockHashes: [...shared, ...H(2, 50)], blockSize: 16 }));
    expect(one.lease.promptBlocks).toBe(9);
    expect(router.activeBlocks("a")).toBe(8 + 1 + 2); // shared 8 once, one partial block, two's own 2
    // two's first 8 blocks are predicted on a (one's decision): only its other 32 tokens are prefill work (Dynamo's new tokens).
    expect(two.decision.predictedCachedTokens).toBe(128);
    expect(router.prefilling("a")).toEqual({ requests: 2, tokens: 133 + 32 });
    one.lease.firstToken();
    expect(router.prefilling("a")).toEqual({ requests: 1, tokens: 32 });
    expect(router.activeBlocks("a")).toBe(11);
    one.lease.release();
    expect(router.activeBlocks("a")).toBe(10);
    two.lease.release();
    two.lease.release();
    expect(router.activeBlocks("a")).toBe(0);
    expect(router.inFlight("a")).toBe(0);
  });

  test("decode_load_model distinct (Dynamo): a sibling of an in-flight prompt adds only its new blocks", () => {
    const registry = registryWith([worker("a"), worker("b")]);
    const base = routerConfig();
    const kv = { ...base.kv, predicted_ttl_ms: 0, decode_load_model: "distinct" as const };
    const router = new Router({ config: routerConfig({ policy: "kv", kv }), registry, clock: new VirtualClock(), rng: new SeededRng(5) });
    const h = H(10);
    const { worker: w } = router.routeAndBook(req({ promptTokens: 160, blockHashes: h, blockSize: 16 }));
    const d = router.explain(req({ promptTokens: 160, blockHashes: h, blockSize: 16 })).decision;
    const t = d.candidates.find((c) => c.worker === w.id)!.terms;
    expect(t).toMatchObject({ active_blocks: 10, new_blocks: 0, decode_blocks: 10, active_prefill_tokens: 160 });
  });

  test("decode_load_model requests (default): every in-flight request's blocks count in full, shared or not", () => {
    const registry = registryWith([worker("a"), worker("b")]);
    const base = routerConfig();
    expect(base.kv.decode_load_model).toBe("requests");
    const router = new Router({ config: routerConfig({ policy: "kv", kv: { ...base.kv, predicted_ttl_ms: 0 } }), registry, clock: new VirtualClock(), rng: new SeededRng(5) });
    const h = H(10);
    const one = router.routeAndBook(req({ promptTokens: 160, blockHashes: h, blockSize: 16 }));
    const t = router.explain(req({ promptTokens: 160, blockHashes: h, blockSize: 16 })).decision.candidates.find((c) => c.worker === one.worker.id)!.terms;
    expect(t).toMatchObject({ active_blocks: 10, new_blocks: 10, decode_blocks: 20 });
    expect(router.activeBlocks(one.worker.id)).toBe(10);
    one.lease.release();
    const t2 = router.explain(req({ promptTokens: 160, blockHashes: h, blockSize: 16 })).decision.candidates[0]!.terms;
    expect(t2).toMatchObject({ active_blocks: 0, new_blocks: 10, decode_blocks: 10 });
  });

  test("every worker holds the document: requests spread by load instead of piling onto the one decoding the same document (issue 25)", () => {
    // a and b both hold the system prompt + document D (engine events), c holds D too. a decodes
    // two questions on D, b one question on another document E it holds; a new question on D
    // must go to the idle c, and with c gone, to b (one request of decode work) rather than a (two).
    const doc = H(100);
    const other = H(100, 10_000);
    const pick = (model: "requests" | "distinct", withIdle: boolean): string => {
      const ws = withIdle ? [worker("a"), worker("b"), worker("c")] : [worker("a"), worker("b")];
      const registry = registryWith(ws);
      const index = new BlockIndex();
      for (const w of ws) for (const hashes of [doc, other]) index.apply(w.id, { kind: "stored", medium: "gpu", hashes });
      const base = routerConfig();
      const cfg = routerConfig({ policy: "kv", kv: { ...base.kv, predicted_ttl_ms: 0, decode_load_model: model }, pipeline: { ...base.pipeline, filters: [], scorers: [{ type: "kv-cost", weight: 1 }] } });
      const router = new Router({ config: cfg, registry, clock: new VirtualClock(), rng: new SeededRng(3), kvIndex: index });
      const q = (n: number, prefix: bigint[]) => req({ promptTokens: (prefix.length + 3) * 16, blockHashes: [...prefix, ...H(3, n)], blockSize: 16 });
      for (const [w, r] of [["a", q(1e6, doc)], ["a", q(2e6, doc)], ["b", q(3e6, other)]] as const) router.book(w, r.promptTokens, { blockHashes: r.blockHashes!, blockSize: 16, cachedTokens: 1600 }).firstToken();
      return router.explain(q(4e6, doc)).decision.chosen;
    };
    expect(pick("requests", true)).toBe("c");
    expect(pick("requests", false)).toBe("b");
    // Dynamo's distinct count sees a's shared document as nearly free decode work.
    expect(pick("distinct", false)).toBe("a");
  });
});

describe("tracked sampling of long prompts", () => {
  test("every block of the first 64, then every 8th; coverage maps back to blocks", async () => {
    const { trackedPositions, blocksCovered } = await import("../../src/router/sampling.ts");
    expect(trackedPositions(10)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    const p = trackedPositions(2000);
    expect(p.slice(62, 67)).toEqual([62, 63, 71, 79, 87]);
    expect(p.length).toBe(64 + Math.floor((2000 - 64) / 8));
    expect(blocksCovered(64)).toBe(64);
    expect(blocksCovered(65)).toBe(72); // position 71 matched: blocks 0..71
  });

  test("a long prompt's overlap is exact at 8-block granularity in memory and in active blocks", () => {
    const m = new PrefixMemory(1e9, 100_000);
    const long = H(2000);
    m.record("w", long.slice(0, 1000), 0);
    expect(m.size("w")).toBe(64 + Math.floor((1000 - 64) / 8));
    expect(m.overlaps(long, 1).get("w")).toBe(1000);
    expect(m.overlaps(long.slice(0, 50), 1).get("w")).toBe(50);
    const registry = registryWith([worker("a")]);
    const base = routerConfig();
    const router = new Router({ config: routerConfig({ policy: "kv", kv: { ...base.kv, decode_load_model: "distinct" } }), registry, clock: new VirtualClock() });
    const { lease } = router.routeAndBook(req({ promptTokens: 2000 * 16 + 3, blockHashes: long, blockSize: 16 }));
    expect(lease.promptBlocks).toBe(2001);
    expect(router.activeBlocks("a")).toBe(2001);
    const sibling = [...long.slice(0, 1003), ...H(10, 900_000)];
    const t = router.explain(req({ promptTokens: 1013 * 16, blockHashes: sibling, blockSize: 16 })).decision.candidates[0]!.terms;
    expect(t.new_blocks).toBe(1013 - 1000); // shared up to the last tracked block (999), at 8-block granularity
    lease.release();
    expect(router.activeBlocks("a")).toBe(0);
  });
});

test("the runner names a scorer that returns a non-finite cost, and the worker", async () => {
  const { PipelinePolicy } = await import("../../src/router/pipeline/runner.ts");
  const bad = { type: "broken", needs: {}, score: () => ({ cost: Number.NaN, terms: {} }) };
  const policy = new PipelinePolicy("t", { filters: [], scorers: [{ scorer: bad, weight: 1 }], picker: { type: "min", needs: {}, pick: () => ({ index: 0, reason: "" }) } });
  expect(() => policy.pick(req(), [worker("w1")], { rng: new SeededRng(1), nowMs: 0, dryRun: false })).toThrow(/scorer broken gave a non-finite cost \(NaN\) for worker w1/);
});
