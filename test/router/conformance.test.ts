// Every registered policy (a preset of the one pipeline), and a preset recomposed in YAML
// (router.pipeline), must honour the Policy contract: pick one of the candidates, never an
// excluded worker (the router filters them, the policy never sees them), give finite costs, be
// deterministic for a seed, explain every candidate it was given, and leave its state alone on a
// dry run. The stages themselves have their own suite (stage-conformance.test.ts).
import { describe, expect, test } from "bun:test";
import { POLICIES, type RouterConfig } from "../../src/config/types.ts";
import { parseConfigText } from "../../src/config/index.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { VirtualClock } from "../../src/core/clock.ts";
import { Router } from "../../src/router/router.ts";
import { POLICY_FACTORIES, policyFactory } from "../../src/router/policies/index.ts";
import type { PolicyFactory } from "../../src/router/types.ts";
import type { Worker } from "../../src/workers/worker.ts";
import { registryWith, req, routerConfig, worker } from "./fixtures.ts";

function fleet(seed: number): Worker[] {
  const rng = new SeededRng(seed);
  return Array.from({ length: 2 + rng.int(9) }, (_, i) =>
    worker(`w${i}`, { load: { running: rng.int(5), waiting: rng.int(3), kv_usage: rng.float() } }),
  );
}

const requests = (n: number, seed: number) => {
  const rng = new SeededRng(seed);
  return Array.from({ length: n }, (_, i) => {
    const doc = BigInt(rng.int(6));
    const blockHashes = Array.from({ length: rng.int(3) === 0 ? 0 : rng.int(30) }, (_, k) => (doc << 32n) + BigInt(k));
    return req({ sessionId: rng.int(3) === 0 ? null : `s${rng.int(50)}`, promptTokens: i, blockHashes, blockSize: 16 });
  });
};

/** A preset recomposed in YAML: prefix memory, then load guard, kv-cost + load scorers, p2c picker. */
const CUSTOM_YAML = `router:
  policy: prefix
  pipeline:
    filters: [role, overload]
    overload: { abs_threshold: 4, rel_threshold: 1.2 }
    scorers: [{ type: kv-cost, weight: 1 }, { type: load, weight: 16 }]
    picker: power-of-two
`;
const custom = parseConfigText(CUSTOM_YAML, "custom.yaml").config!.router;

const cases: [string, PolicyFactory, RouterConfig][] = [
  ...Object.values(POLICY_FACTORIES).map((f) => [f.name, f, routerConfig({ policy: f.name as never })] as [string, PolicyFactory, RouterConfig]),
  ["custom (YAML router.pipeline)", policyFactory("prefix")!, { ...routerConfig(), ...custom, seed: 42 }],
];

test("the registry lists exactly the policies the config accepts", () => {
  expect(Object.keys(POLICY_FACTORIES).sort()).toEqual([...POLICIES].sort());
  for (const [name, f] of Object.entries(POLICY_FACTORIES)) expect(f.name as string).toBe(name);
});

describe.each(cases)("policy %s", (_name, factory, config) => {
  test("picks one of the candidates and explains every candidate, in order", () => {
    for (let seed = 1; seed <= 20; seed++) {
      const ws = fleet(seed);
      const policy = factory.create(config);
      const rng = new SeededRng(seed);
      for (const r of requests(50, seed)) {
        const p = policy.pick(r, ws, { rng, nowMs: 0, dryRun: false });
        expect(ws.map((w) => w.id)).toContain(p.chosen);
        expect(p.candidates.map((c) => c.worker)).toEqual(ws.map((w) => w.id));
        for (const c of p.candidates) {
          expect(Object.keys(c.terms).length).toBeGreaterThan(0);
          if (c.terms.cost !== undefined) expect(Number.isFinite(c.terms.cost)).toBe(true);
        }
        expect(p.reason.length).toBeGreaterThan(0);
      }
    }
  });

  test("never routes to an excluded or non-ready worker through the Router", () => {
    const ws = [...fleet(7), worker("down", { state: "starting" }), worker("bad")];
    const router = new Router({ config, registry: registryWith(ws), clock: new VirtualClock(), rng: new SeededRng(3) });
    for (const r of requests(200, 9)) {
      const { worker: w } = router.route({ ...r, exclude: new Set(["bad", "w0"]) });
      expect(["bad", "w0", "down"]).not.toContain(w.id);
    }
  });

  test("is deterministic for a seed", () => {
    const run = () => {
      const policy = factory.create(config);
      const rng = new SeededRng(11);
      const ws = fleet(5);
      return requests(100, 5).map((r) => policy.pick(r, ws, { rng, nowMs: 0, dryRun: false }).chosen);
    };
    expect(run()).toEqual(run());
  });

  test("a dry run leaves the policy's state alone", () => {
    const ws = fleet(4);
    const a = factory.create(config);
    const b = factory.create(config);
    const ra = new SeededRng(2);
    const rb = new SeededRng(2);
    const explainRng = new SeededRng(99);
    const picksA: string[] = [];
    const picksB: string[] = [];
    for (const r of requests(30, 1)) {
      a.pick(r, ws, { rng: explainRng, nowMs: 0, dryRun: true });
      picksA.push(a.pick(r, ws, { rng: ra, nowMs: 0, dryRun: false }).chosen);
      picksB.push(b.pick(r, ws, { rng: rb, nowMs: 0, dryRun: false }).chosen);
    }
    expect(picksA).toEqual(picksB);
  });

  test("a single candidate is always chosen", () => {
    const policy = factory.create(config);
    const only = [worker("solo", { load: { in_flight: 99 } })];
    for (const r of requests(10, 3)) expect(policy.pick(r, only, { rng: new SeededRng(1), nowMs: 0, dryRun: false }).chosen).toBe("solo");
  });
});
