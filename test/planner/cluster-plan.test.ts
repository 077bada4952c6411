// One planner for the cluster: assignments pass the node's lease and TermFence (a deposed leader
// that keeps sending is refused and counted), are applied once per id, a new leader acts only after
// a full window of every live node's summaries, and starts go to hosts that have the pool's template.
import { describe, expect, test } from "bun:test";
import { TermFence } from "../../src/cluster/fence.ts";
import { VirtualClock } from "../../src/core/clock.ts";
import type { ActuationResult, Actuator } from "../../src/planner/actuator.ts";
import { AssignmentApplier, type Assignment, type AssignmentReply } from "../../src/planner/assign.ts";
import { ClusterPlanning, type NodeSummary } from "../../src/planner/cluster-plan.ts";
import { pickHost } from "../../src/planner/placement.ts";
import type { Action, PoolSpec } from "../../src/planner/types.ts";

class CountingActuator implements Actuator {
  readonly acts: Action[] = [];
  fleet() {
    return { engines: [], hosts: [] };
  }
  async act(a: Action): Promise<ActuationResult> {
    this.acts.push(a);
    return { ok: true, engine: a.kind === "start" ? `e${this.acts.length}` : a.engine };
  }
  watch() {
    return () => {};
  }
  predictReadyMs() {
    return null;
  }
}

const start = (id: string, term: number, leader: string): Assignment => ({ id, term, leader, action: { kind: "start", pool: "m/aggregated", host: "n2" } });

describe("assignments on a node", () => {
  test("a deposed leader that keeps sending is refused and counted; the current leader's are applied once per id", async () => {
    let lease = { term: 1, leader: "n1" };
    const local = new CountingActuator();
    const refusals: string[] = [];
    const applier = new AssignmentApplier({ fence: new TermFence(), lease: () => lease, local, onRefused: (w) => refusals.push(w) });
    expect((await applier.apply(start("n1/1/0", 1, "n1"))).ok).toBe(true);
    // Failover: n3 leads at term 2; n1 does not know yet and keeps sending its term-1 assignments.
    lease = { term: 2, leader: "n3" };
    for (let i = 1; i <= 3; i++) expect(await applier.apply(start(`n1/1/${i}`, 1, "n1"))).toEqual({ ok: false, refused: "stale_term", term: 2 });
    const first = await applier.apply(start("n3/2/0", 2, "n3"));
    const again = await applier.apply(start("n3/2/0", 2, "n3"));
    expect(first).toMatchObject({ ok: true, duplicate: false });
    expect(again).toMatchObject({ ok: true, duplicate: true });
    expect(local.acts.length).toBe(2); // no double start: the resent id was not applied twice
    expect(refusals).toEqual(["stale_term", "stale_term", "stale_term"]);
    // Same term, another leader: a bug somewhere, refused; an unknown higher term waits for its beat.
    expect(await applier.apply(start("n9/2/0", 2, "n9"))).toMatchObject({ ok: false, refused: "conflicting_leader" });
    expect(await applier.apply(start("n4/5/0", 5, "n4"))).toMatchObject({ ok: false, refused: "unknown_term" });
    expect(await applier.apply({ id: "x", term: 2, leader: "n3", action: { kind: "explode" } } as unknown as Assignment)).toMatchObject({ ok: false, refused: "bad_assignment" });
    expect(applier.refusedTotal).toBe(6);
  });

  test("no lease (election under way): nothing is applied", async () => {
    const local = new CountingActuator();
    const applier = new AssignmentApplier({ fence: new TermFence(), lease: () => null, local });
    expect(await applier.apply(start("n1/1/0", 1, "n1"))).toMatchObject({ ok: false, refused: "no_lease" });
    expect(local.acts).toEqual([]);
  });
});

const summary = (node: string, arrivals: number, over: Partial<NodeSummary> = {}): NodeSummary => ({
  node, epoch: `${node}@0`, totals: { "m/aggregated": { arrivals, promptTokens: arrivals * 100, decodeTokens: arrivals * 10 } }, held: {}, engines: [], load: {},
  host: { gpusTotal: 4, gpusFree: 4, backoffUntilMs: 0 }, templates: ["m/aggregated"], latency: null, ...over,
});

describe("the leader's view", () => {
  test("a new leader waits for two summaries of every live node, then sums their rates and held requests", () => {
    const clock = new VirtualClock(0);
    let term: number | null = 3;
    const live = ["n1", "n2"];
    const cp = new ClusterPlanning({ self: "n1", clock, pools: ["m/aggregated"], leading: () => term, leader: () => "n1", live: () => live, send: async () => ({ ok: false, refused: "no_lease", term: 0 }), staleMs: 30_000, gpusOf: () => 1 });
    expect(cp.leading()).toBe(3);
    cp.ingest(summary("n1", 0));
    cp.ingest(summary("n2", 0));
    expect(cp.observe(clock.now(), 3)).toContain("new_leader_window");
    clock.advance(10_000);
    cp.ingest(summary("n1", 50));
    expect(cp.observe(clock.now(), 3)).toBe("new_leader_window: waiting for n2");
    cp.ingest(summary("n2", 150, { held: { "m/aggregated": { requests: 2, promptTokens: 300 } } }));
    const seen = cp.observe(clock.now(), 3);
    if (typeof seen === "string") throw new Error(seen);
    expect(seen.signals.get("m/aggregated")!.arrivalsPerS).toBeCloseTo(20, 6); // (50 + 150) / 10 s
    expect(seen.signals.get("m/aggregated")!.heldRequests).toBe(2);
    expect(seen.fleet.hosts.map((h) => h.name)).toEqual(["n1", "n2"]);
    // A node that stays silent past staleMs is left out (it died or is cut off) instead of blocking the plan.
    term = 4;
    expect(cp.leading()).toBe(4);
    clock.advance(31_000);
    cp.ingest(summary("n1", 60));
    clock.advance(10_000);
    cp.ingest(summary("n1", 70));
    const later = cp.observe(clock.now(), 4);
    if (typeof later === "string") throw new Error(later);
    expect(later.fleet.hosts.map((h) => h.name)).toEqual(["n1"]);
  });

  test("a start counts as starting from the moment it is sent, before the node answers (no double start from a quick second tick)", async () => {
    const clock = new VirtualClock(0);
    let answer: (r: AssignmentReply) => void = () => {};
    const cp = new ClusterPlanning({
      self: "n1", clock, pools: ["m/aggregated"], leading: () => 1, leader: () => "n1", live: () => ["n1"], staleMs: 30_000, gpusOf: () => 1,
      send: () => new Promise<AssignmentReply>((r) => (answer = r)),
    });
    cp.leading();
    const act = cp.actuator(1).act({ kind: "start", pool: "m/aggregated", host: "n1" });
    const f = cp.actuator(1).withLaunched({ engines: [], hosts: [{ name: "n1", gpusTotal: 2, gpusFree: 2, backoffUntilMs: 0 }] }, clock.now());
    expect(f.engines.map((e) => e.state)).toEqual(["starting"]);
    expect(f.hosts[0]!.gpusFree).toBe(1);
    answer({ ok: true, duplicate: false, result: { ok: true, engine: "n1/sim-0" } });
    await act;
    expect(cp.actuator(1).withLaunched({ engines: [], hosts: [] }, clock.now()).engines.map((e) => e.id)).toEqual(["n1/sim-0"]);
  });

  test("placement: only hosts with the pool's template, TP on one host", () => {
    const pool: PoolSpec = { id: "m/aggregated", model: "m", role: "aggregated", min: 0, max: 4, gpusPerEngine: 2, capacity: { prefillTokensPerS: 1, decodeTokensPerS: 1 }, canSleep: false, floors: [], pinned: null };
    const hosts = [
      { name: "a", gpusTotal: 8, gpusFree: 8, backoffUntilMs: 0, pools: ["other/aggregated"] },
      { name: "b", gpusTotal: 4, gpusFree: 1, backoffUntilMs: 0, pools: ["m/aggregated"] },
      { name: "c", gpusTotal: 4, gpusFree: 2, backoffUntilMs: 0, pools: ["m/aggregated"] },
    ];
    const free = new Map(hosts.map((h) => [h.name, h.gpusFree]));
    expect(pickHost(pool, { engines: [], hosts }, free, 0)).toBe("c");
    free.set("c", 0);
    expect(pickHost(pool, { engines: [], hosts }, free, 0)).toBeNull();
  });
});
