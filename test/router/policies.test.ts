import { describe, expect, test } from "bun:test";
import { SeededRng } from "../../src/core/rng.ts";
import type { Worker } from "../../src/workers/worker.ts";
import { roundRobin } from "../../src/router/policies/round-robin.ts";
import { random } from "../../src/router/policies/random.ts";
import { powerOfTwo } from "../../src/router/policies/power-of-two.ts";
import { leastLoaded } from "../../src/router/policies/least-loaded.ts";
import { session } from "../../src/router/policies/session.ts";
import { effectiveLoad } from "../../src/router/load.ts";
import type { Policy, RouteCtx } from "../../src/router/types.ts";
import { req, routerConfig, worker, workers } from "./fixtures.ts";

const ctx = (seed = 1): RouteCtx => ({ rng: new SeededRng(seed), nowMs: 0, dryRun: false });

function counts(policy: Policy, ws: Worker[], n: number, c = ctx(), mk = (i: number) => req({ promptTokens: i })): Map<string, number> {
  const m = new Map<string, number>();
  for (let i = 0; i < n; i++) {
    const id = policy.pick(mk(i), ws, c).chosen;
    m.set(id, (m.get(id) ?? 0) + 1);
  }
  return m;
}

describe("effective load", () => {
  test.each([
    [{ in_flight: 3, running: null, waiting: null }, 3],
    [{ in_flight: 3, running: 1, waiting: 0 }, 3],
    [{ in_flight: 1, running: 4, waiting: 2 }, 6],
    [{ in_flight: 0, running: null, waiting: 5 }, 5],
  ])("%o → %d", (load, want) => {
    expect(effectiveLoad({ kv_usage: null, scraped_at_ms: null, ...load })).toBe(want);
  });
});

describe("round-robin", () => {
  test("cycles evenly through workers in id order", () => {
    const p = roundRobin.create(routerConfig());
    const ws = [worker("c"), worker("a"), worker("b")];
    const seq = Array.from({ length: 6 }, () => p.pick(req(), ws, ctx()).chosen);
    expect(seq).toEqual(["a", "b", "c", "a", "b", "c"]);
    expect([...counts(p, workers(4), 400).values()]).toEqual([100, 100, 100, 100]);
  });

  test("keeps a separate cycle per model", () => {
    const p = roundRobin.create(routerConfig());
    const ws = workers(2);
    expect(p.pick(req({ model: "x" }), ws, ctx()).chosen).toBe("w0");
    expect(p.pick(req({ model: "y" }), ws, ctx()).chosen).toBe("w0");
    expect(p.pick(req({ model: "x" }), ws, ctx()).chosen).toBe("w1");
  });
});

test("random spreads roughly uniformly", () => {
  const c = counts(random.create(routerConfig()), workers(4), 4000);
  for (const n of c.values()) expect(Math.abs(n - 1000)).toBeLessThan(150);
});

describe("power-of-two", () => {
  test("of the two sampled, the lighter always wins", () => {
    const p = powerOfTwo.create(routerConfig());
    const ws = [worker("a", { load: { in_flight: 0 } }), worker("b", { load: { in_flight: 5 } }), worker("c", { load: { in_flight: 9 } })];
    const c = ctx(7);
    for (let i = 0; i < 300; i++) {
      const d = p.pick(req(), ws, c);
      const sampled = d.candidates.filter((x) => x.terms.sampled === 1);
      expect(sampled.length).toBe(2);
      const lightest = sampled.reduce((m, x) => ((x.terms.load as number) < (m.terms.load as number) ? x : m));
      expect(d.chosen).toBe(lightest.worker);
    }
  });

  test("prefers lighter workers overall; the heaviest can never win against anyone", () => {
    const ws = [worker("a", { load: { in_flight: 0 } }), worker("b", { load: { in_flight: 5 } }), worker("c", { load: { running: 9, waiting: 1 } })];
    const c = counts(powerOfTwo.create(routerConfig()), ws, 3000);
    // a wins whenever sampled (2/3 of pairs), b only against c (1/3), c never.
    expect(c.get("a")!).toBeGreaterThan(1800);
    expect(c.get("b")!).toBeGreaterThan(800);
    expect(c.get("c") ?? 0).toBe(0);
  });
});

describe("least-loaded", () => {
  test("picks the lowest max(in_flight, running + waiting), then lowest KV usage", () => {
    const p = leastLoaded.create(routerConfig());
    const ws = [
      worker("a", { load: { in_flight: 2, running: 6, waiting: 1 } }), // 7
      worker("b", { load: { in_flight: 4, running: 1, waiting: 0 } }), // 4
      worker("c", { load: { in_flight: 3, running: 2, waiting: 2, kv_usage: 0.9 } }), // 4, fuller cache
    ];
    const d = p.pick(req(), ws, ctx());
    expect(d.chosen).toBe("b");
    expect(d.candidates.find((x) => x.worker === "a")?.terms).toMatchObject({ in_flight: 2, running: 6, waiting: 1, load: 7 });
  });

  test("breaks exact ties at random, reproducibly for a seed", () => {
    const p = leastLoaded.create(routerConfig());
    const c = counts(p, workers(3), 3000);
    for (const n of c.values()) expect(Math.abs(n - 1000)).toBeLessThan(150);
    const seq = (s: number) => Array.from({ length: 20 }, ((c) => () => p.pick(req(), workers(3), c).chosen)(ctx(s)));
    expect(seq(5)).toEqual(seq(5));
  });
});

describe("session", () => {
  const cfg = routerConfig({ session: { header: "x-session-id", load_factor: 1.25, virtual_nodes: 100 } });
  const sessions = Array.from({ length: 2000 }, (_, i) => `user-${i}`);
  const assign = (p: Policy, ws: Worker[]) => new Map(sessions.map((s) => [s, p.pick(req({ sessionId: s }), ws, ctx()).chosen]));

  test("the same session sticks to the same worker", () => {
    const p = session.create(cfg);
    const ws = workers(5);
    for (const s of sessions.slice(0, 50)) {
      const first = p.pick(req({ sessionId: s }), ws, ctx()).chosen;
      for (let i = 0; i < 5; i++) expect(p.pick(req({ sessionId: s }), ws, ctx(i)).chosen).toBe(first);
    }
  });

  test("sessions spread over all workers (virtual nodes)", () => {
    const c = new Map<string, number>();
    for (const w of assign(session.create(cfg), workers(5)).values()) c.set(w, (c.get(w) ?? 0) + 1);
    expect(c.size).toBe(5);
    for (const n of c.values()) expect(Math.abs(n - 400)).toBeLessThan(120);
  });

  test("when a worker leaves, only its sessions move; when it returns, they come back", () => {
    const p = session.create(cfg);
    const ws = workers(5);
    const before = assign(p, ws);
    const after = assign(p, ws.filter((w) => w.id !== "w2"));
    let moved = 0;
    for (const s of sessions) {
      if (before.get(s) === "w2") moved++;
      else expect(after.get(s)).toBe(before.get(s)!);
    }
    expect(moved).toBeGreaterThan(0);
    expect(assign(p, ws)).toEqual(before);
  });

  test("bounded load: an overloaded home worker spills to the next worker on the ring", () => {
    const p = session.create(cfg);
    const ws = workers(4);
    const home = p.pick(req({ sessionId: "hot" }), ws, ctx()).chosen;
    const busy = ws.map((w) => (w.id === home ? worker(w.id, { load: { in_flight: 20 } }) : w));
    const d = p.pick(req({ sessionId: "hot" }), busy, ctx());
    expect(d.chosen).not.toBe(home);
    expect(d.candidates.find((c) => c.worker === home)?.terms).toMatchObject({ ring_rank: 0, over_bound: 1 });
    expect(d.candidates.find((c) => c.worker === d.chosen)?.terms.ring_rank).toBeGreaterThan(0);
    // bound = 1.25 × mean(20, 0, 0, 0) + 1 = 7.25
    expect(d.candidates[0]!.terms.bound).toBe(7.25);
    // Spilling is consistent: the hot session keeps going to the same second worker.
    expect(p.pick(req({ sessionId: "hot" }), busy, ctx(9)).chosen).toBe(d.chosen);
  });

  test("a hot session cannot pile more than the cap onto one worker", () => {
    const p = session.create(cfg);
    const ws = workers(4);
    // Book every pick as in flight (what the router's leases do) and check no worker exceeds the cap.
    for (let i = 0; i < 400; i++) {
      const d = p.pick(req({ sessionId: "hot" }), ws, ctx());
      const mean = ws.reduce((s, w) => s + w.load.in_flight, 0) / ws.length;
      const w = ws.find((x) => x.id === d.chosen)!;
      expect(w.load.in_flight).toBeLessThanOrEqual(1.25 * mean + 1);
      w.load.in_flight++;
    }
    // The home worker takes as much as the bound allows (stickiness), and no worker goes over it.
    const home = p.pick(req({ sessionId: "hot" }), workers(4), ctx()).chosen;
    expect(ws.find((w) => w.id === home)!.load.in_flight).toBeGreaterThanOrEqual(120);
    for (const w of ws) expect(w.load.in_flight).toBeLessThanOrEqual(1.25 * 100 + 2);
  });

  test("without a session id it falls back to least-loaded", () => {
    const p = session.create(cfg);
    const ws = [worker("a", { load: { in_flight: 3 } }), worker("b", { load: { in_flight: 1 } }), worker("c", { load: { running: 2 } })];
    const d = p.pick(req({ sessionId: null }), ws, ctx());
    expect(d.chosen).toBe("b");
    expect(d.reason).toContain("least-loaded");
  });
});
