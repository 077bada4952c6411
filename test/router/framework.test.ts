// The one routing framework: every policy is a preset of filters → scorers → picker; the Router
// reports what its stages read (`router.needs`, the source of policyNeedsPrompt) and the seed it
// routes with (`router.seed`); a preset can be recomposed in YAML (router.pipeline) or written as
// one file (the README's worked example, built here as `cache-first`).
import { describe, expect, test } from "bun:test";
import { parseConfigText } from "../../src/config/index.ts";
import { VirtualClock } from "../../src/core/clock.ts";
import { policyNeedsPrompt } from "../../src/preprocess/shared.ts";
import { prefixSource } from "../../src/router/pipeline/sources.ts";
import { POLICY_FACTORIES } from "../../src/router/policies/index.ts";
import { preset } from "../../src/router/policies/preset.ts";
import { PrefixMemory } from "../../src/router/prefix-memory.ts";
import { Router } from "../../src/router/router.ts";
import { registryWith, req, routerConfig, worker, workers } from "./fixtures.ts";

const clock = () => new VirtualClock();

describe("router.needs: the union of the stages' declared inputs", () => {
  test.each([
    ["round-robin", { blockHashes: false, load: false, sessionKey: false, role: true }],
    ["random", { blockHashes: false, load: false, sessionKey: false, role: true }],
    ["power-of-two", { blockHashes: false, load: true, sessionKey: false, role: true }],
    ["least-loaded", { blockHashes: false, load: true, sessionKey: false, role: true }],
    ["session", { blockHashes: false, load: true, sessionKey: true, role: true }],
    ["kv", { blockHashes: true, load: true, sessionKey: true, role: true }],
    ["prefix", { blockHashes: true, load: true, sessionKey: true, role: true }],
    ["predicted", { blockHashes: true, load: true, sessionKey: false, role: true }],
    ["approx", { blockHashes: true, load: true, sessionKey: true, role: true }],
    ["prefixaware", { blockHashes: true, load: false, sessionKey: false, role: true }],
  ] as const)("%s", (policy, needs) => {
    const config = routerConfig({ policy });
    const router = new Router({ config, registry: registryWith(workers(2)), clock: clock() });
    expect(router.needs).toEqual(needs);
    // policyNeedsPrompt is a shim over it, whichever form the caller has at hand.
    expect(policyNeedsPrompt(router)).toBe(needs.blockHashes);
    expect(policyNeedsPrompt(config)).toBe(needs.blockHashes);
    expect(policyNeedsPrompt({ policy })).toBe(needs.blockHashes);
  });

  test("every registered policy is covered above", () => {
    expect(Object.keys(POLICY_FACTORIES).length).toBe(10);
  });
});

describe("a preset recomposed in YAML (router.pipeline)", () => {
  const yaml = `router:
  policy: prefix
  pipeline:
    filters: []
    scorers: [{ type: load, weight: 1 }]
    picker: lightest
`;

  test("routes by its stages and explains with their words", () => {
    const r = parseConfigText(yaml, "custom.yaml");
    expect(r.findings.filter((f) => f.severity === "error")).toEqual([]);
    const config = r.config!.router;
    const ws = [worker("a", { load: { running: 3, waiting: 0 } }), worker("b", { load: { running: 1, waiting: 0, kv_usage: 0.9 } }), worker("c", { load: { running: 1, waiting: 0, kv_usage: 0.1 } })];
    const router = new Router({ config, registry: registryWith(ws), clock: clock() });
    // The prefix source still reads block hashes, even though no scorer weighs overlap.
    expect(router.needs).toEqual({ blockHashes: true, load: true, sessionKey: false, role: true });
    const d = router.route(req({ blockHashes: [1n, 2n], blockSize: 16, promptTokens: 32 })).decision;
    expect(d.chosen).toBe("c"); // lightest: load 1, then the lower KV usage
    expect(d.reason).toBe("lowest load = max(in_flight, running + waiting) = 1 among 3 workers");
    expect(d.candidates.map((c) => c.terms.load_weighted)).toEqual([3, 1, 1]);
    expect(d.request).toEqual({ tokens: 32, block_size: 16, hashed_blocks: 2, request_blocks: 2 });
  });

  test("an unknown stage name is a config finding that lists the accepted ones", () => {
    const r = parseConfigText(yaml.replace("picker: lightest", "picker: fastest"), "custom.yaml");
    const f = r.findings.find((x) => x.path === "router.pipeline.picker");
    expect(f?.message).toMatch(/lightest/);
    expect(f?.message).toMatch(/round-robin/);
  });
});

test("a new block-hash policy is one preset (README worked example): cache-first", () => {
  const cacheFirst = preset({
    name: "cache-first",
    spec: () => ({ filters: ["overload"], scorers: [{ type: "kv-cost", weight: 1 }], picker: "min" }),
    source: (cfg) => prefixSource(new PrefixMemory(cfg.prefix.ttl_ms, cfg.prefix.max_blocks_per_worker)),
  });
  const config = routerConfig();
  const router = new Router({ config, registry: registryWith(workers(4)), clock: clock(), policy: cacheFirst.create(config) });
  expect(router.policy.name).toBe("cache-first");
  expect(router.needs.blockHashes).toBe(true);
  const doc = Array.from({ length: 40 }, (_, i) => 77n + BigInt(i));
  const first = router.route(req({ blockHashes: doc, blockSize: 16, promptTokens: 640 }));
  const again = router.route(req({ blockHashes: doc, blockSize: 16, promptTokens: 640 }));
  expect(again.worker.id).toBe(first.worker.id);
  expect(again.decision.reason).toContain("overlap gpu/cpu/disk 40/0/0 of 40 blocks");
});

describe("router.seed", () => {
  test("is config.seed when set, and a caller's seed overrides it", () => {
    const registry = registryWith(workers(3));
    expect(new Router({ config: routerConfig({ seed: 42 }), registry, clock: clock() }).seed).toBe(42);
    expect(new Router({ config: routerConfig({ seed: 42 }), registry, clock: clock(), seed: 9 }).seed).toBe(9);
  });

  test("seed 0 draws one, reports it, and that seed replays the same decisions", () => {
    const registry = registryWith(workers(5));
    const a = new Router({ config: routerConfig({ policy: "random", seed: 0 }), registry, clock: clock() });
    expect(a.seed).not.toBe(0);
    const b = new Router({ config: routerConfig({ policy: "random", seed: a.seed }), registry, clock: clock() });
    const picks = (r: Router) => Array.from({ length: 50 }, () => r.route(req()).worker.id);
    expect(picks(a)).toEqual(picks(b));
  });
});
