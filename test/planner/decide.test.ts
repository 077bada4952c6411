// The planner's pure decision, run tick by tick against a small fleet model (engines start after a
// delay, drained engines finish their requests), checking the invariants every tick.
import { describe, expect, test } from "bun:test";
import { decide, initialMemory } from "../../src/planner/decide.ts";
import type { Action, Fleet, FleetEngine, FleetHost, PlannerConfig, PlannerMemory, PoolSignals, PoolSpec } from "../../src/planner/types.ts";

const pool = (over: Partial<PoolSpec> = {}): PoolSpec => ({
  id: "m/aggregated", model: "m", role: "aggregated", min: 0, max: 8, gpusPerEngine: 1,
  capacity: { prefillTokensPerS: 10_000, decodeTokensPerS: 1_000 }, canSleep: false, floors: [], pinned: null, ...over,
});

const config = (pools: PoolSpec[], over: Partial<PlannerConfig> = {}): PlannerConfig => ({
  utilizationTarget: 0.8, downHeadroom: 0.8, stableWindowMs: 60_000, panicWindowMs: 6_000, downWindowMs: 300_000, downStepMs: 120_000,
  upHoldMs: 30_000, idleToSleepMs: 300_000, sleepToStopMs: 1_800_000, gpuBudget: null, pools, ...over,
});

/** decode tokens/s that need exactly `engines` engines at the target utilisation (aggregated pool, no prefill). */
const load = (engines: number): PoolSignals => ({ arrivalsPerS: engines, uncachedPrefillTokensPerS: 0, decodeTokensPerS: engines * 800, heldRequests: 0, heldTokens: 0 });
const ZERO: PoolSignals = { arrivalsPerS: 0, uncachedPrefillTokensPerS: 0, decodeTokensPerS: 0, heldRequests: 0, heldTokens: 0 };

class World {
  engines: FleetEngine[] = [];
  memory: PlannerMemory;
  log: string[] = [];
  now = 0;
  private seq = 0;
  constructor(
    readonly cfg: PlannerConfig,
    readonly hosts: { name: string; gpus: number }[] = [{ name: "h1", gpus: 8 }],
    readonly startMs = 45_000,
  ) {
    this.memory = initialMemory(0);
  }
  fleet(): Fleet {
    const hosts: FleetHost[] = this.hosts.map((h) => ({
      name: h.name, gpusTotal: h.gpus, backoffUntilMs: 0,
      gpusFree: h.gpus - this.engines.filter((e) => e.host === h.name && e.state !== "stopped").reduce((n, e) => n + e.gpus, 0),
    }));
    return { engines: this.engines, hosts };
  }
  tick(signals: Record<string, PoolSignals>, dtMs = 10_000, inFlightPerReady = 0): Action[] {
    this.now += dtMs;
    for (const e of this.engines) {
      if ((e.state === "starting" && this.now - e.sinceMs >= this.startMs) || (e.state === "waking" && this.now - e.sinceMs >= 3_000)) Object.assign(e, { state: "ready", sinceMs: this.now });
      if (e.state === "ready") e.inFlight = inFlightPerReady;
      if (e.state === "draining") e.inFlight = 0; // drained engines finish their requests within a tick
    }
    const d = decide(this.now, (this.now / 1000) % 86_400, new Map(Object.entries(signals)), this.fleet(), this.cfg, this.memory);
    this.memory = d.memory;
    for (const a of d.actions) {
      this.log.push(`${this.now} ${a.kind} ${"engine" in a ? a.engine : a.host}`);
      if (a.kind === "start") this.engines.push({ id: `e${this.seq++}`, pool: a.pool, host: a.host, state: "starting", inFlight: 0, pendingTransfers: 0, gpus: 1, sinceMs: this.now });
      else {
        const e = this.engines.find((x) => x.id === a.engine)!;
        // Invariant: never stop or sleep an engine with work on it.
        if (a.kind === "stop" || a.kind === "sleep") expect(e.inFlight === 0 && e.pendingTransfers === 0).toBe(true);
        if (a.kind === "stop") expect(["draining", "sleeping"]).toContain(e.state);
        Object.assign(e, { state: a.kind === "stop" ? "stopped" : a.kind === "drain" ? "draining" : a.kind === "sleep" ? "sleeping" : "waking", sinceMs: this.now });
      }
    }
    // Invariant: GPUs never over-subscribed, on any host or against the budget.
    for (const h of this.fleet().hosts) expect(h.gpusFree).toBeGreaterThanOrEqual(0);
    if (this.cfg.gpuBudget !== null) expect(this.engines.filter((e) => e.state !== "stopped").length).toBeLessThanOrEqual(this.cfg.gpuBudget);
    return d.actions;
  }
  count(...states: FleetEngine["state"][]): number {
    return this.engines.filter((e) => states.includes(e.state)).length;
  }
}

describe("planner decide()", () => {
  test("scales up at once, counting engines already starting (no cascade while they warm up)", () => {
    const w = new World(config([pool()]));
    const first = w.tick({ "m/aggregated": load(3) });
    expect(first.filter((a) => a.kind === "start")).toHaveLength(3);
    for (let i = 0; i < 3; i++) expect(w.tick({ "m/aggregated": load(3) })).toEqual([]); // still starting: nothing more
    expect(w.count("starting", "ready")).toBe(3);
  });

  test("constant load holds: no 2↔1 flap over hours (N/(N−1) consolidation)", () => {
    for (const engines of [1.05, 1.6, 2.4, 3.9]) {
      const w = new World(config([pool()]));
      for (let i = 0; i < 1000; i++) w.tick({ "m/aggregated": load(engines) });
      const afterSettling = w.log.filter((l) => Number(l.split(" ")[0]) > 600_000);
      expect(afterSettling).toEqual([]);
      expect(w.count("ready")).toBe(Math.ceil(engines));
    }
  });

  test("load that falls is followed down one engine at a time, after the down window", () => {
    const w = new World(config([pool()]));
    for (let i = 0; i < 60; i++) w.tick({ "m/aggregated": load(4) });
    expect(w.count("ready")).toBe(4);
    const downAt: number[] = [];
    for (let i = 0; i < 200; i++) if (w.tick({ "m/aggregated": load(1) }).some((a) => a.kind === "drain")) downAt.push(w.now);
    // Demand is 1 engine at the target: 2 → 1 would need 1 ≤ (2 − 1) × 0.8 headroom, so 2 stay.
    expect(w.count("ready")).toBe(2);
    expect(downAt[0]! - 600_000).toBeGreaterThanOrEqual(300_000);
    for (let i = 1; i < downAt.length; i++) expect(downAt[i]! - downAt[i - 1]!).toBeGreaterThanOrEqual(120_000);
  });

  test("zero traffic reaches zero within the idle bound; sleeping pools sleep first, then stop", () => {
    const w = new World(config([pool({ canSleep: true })], { sleepToStopMs: 600_000 }));
    for (let i = 0; i < 10; i++) w.tick({ "m/aggregated": load(2) });
    const idleFrom = w.now;
    let zeroAt = -1;
    for (let i = 0; i < 200 && zeroAt < 0; i++) {
      w.tick({ "m/aggregated": ZERO });
      if (w.count("ready", "starting", "waking") === 0) zeroAt = w.now;
    }
    expect(zeroAt - idleFrom).toBeLessThanOrEqual(300_000 + 10_000);
    // The down window may retire one engine first (drained → stopped); the idle rule sleeps the rest.
    expect(w.count("sleeping")).toBeGreaterThanOrEqual(1);
    expect(w.count("sleeping") + w.count("stopped")).toBe(2);
    for (let i = 0; i < 70; i++) w.tick({ "m/aggregated": ZERO });
    expect(w.count("sleeping", "ready")).toBe(0);
  });

  test("a held request wakes a sleeping engine before any cold start", () => {
    const w = new World(config([pool({ canSleep: true })]));
    w.engines.push({ id: "s0", pool: "m/aggregated", host: "h1", state: "sleeping", inFlight: 0, pendingTransfers: 0, gpus: 1, sinceMs: 0 });
    const acts = w.tick({ "m/aggregated": { ...ZERO, heldRequests: 1, heldTokens: 100 } });
    expect(acts).toEqual([{ kind: "wake", pool: "m/aggregated", engine: "s0" }]);
  });

  test("GPU budget and host GPUs are never exceeded; pools are served in a fixed order", () => {
    const a = pool({ id: "a/aggregated", model: "a" });
    const b = pool({ id: "b/aggregated", model: "b" });
    const w = new World(config([b, a], { gpuBudget: 5 }), [{ name: "h1", gpus: 4 }, { name: "h2", gpus: 4 }]);
    const d = w.tick({ "a/aggregated": load(4), "b/aggregated": load(4) });
    expect(d.filter((x) => x.kind === "start").map((x) => x.pool)).toEqual(["a/aggregated", "a/aggregated", "a/aggregated", "a/aggregated", "b/aggregated"]);
    for (let i = 0; i < 30; i++) w.tick({ "a/aggregated": load(4), "b/aggregated": load(4) });
  });

  test("missing or NaN signals hold (only safety stops), zero traffic is a real zero", () => {
    const w = new World(config([pool()]));
    for (let i = 0; i < 10; i++) w.tick({ "m/aggregated": load(2) });
    const before = w.log.length;
    for (let i = 0; i < 100; i++) w.tick({ "m/aggregated": { ...ZERO, decodeTokensPerS: NaN } });
    expect(w.log.length).toBe(before);
    expect(w.count("ready")).toBe(2);
  });

  test("a new leader makes no scale-down before one down window has passed", () => {
    const w = new World(config([pool()]));
    w.engines.push(...[0, 1, 2].map((i) => ({ id: `old${i}`, pool: "m/aggregated", host: "h1", state: "ready" as const, inFlight: 0, pendingTransfers: 0, gpus: 1, sinceMs: 0 })));
    const drains: number[] = [];
    for (let i = 0; i < 60; i++) if (w.tick({ "m/aggregated": load(1) }, 10_000, 1).some((a) => a.kind === "drain")) drains.push(w.now);
    expect(drains[0]).toBeGreaterThanOrEqual(300_000);
  });

  test("busy engines are drained, never stopped; a prefill engine owing a KV transfer is never the victim", () => {
    const w = new World(config([pool()], { downWindowMs: 20_000, downStepMs: 0, upHoldMs: 0 }));
    w.engines.push(
      { id: "p0", pool: "m/aggregated", host: "h1", state: "ready", inFlight: 0, pendingTransfers: 2, gpus: 1, sinceMs: 0 },
      { id: "p1", pool: "m/aggregated", host: "h1", state: "ready", inFlight: 3, pendingTransfers: 0, gpus: 1, sinceMs: 0 },
    );
    w.memory = { leaderSinceMs: -1e9, pools: {} };
    const d = decide(50_000, 0, new Map([["m/aggregated", ZERO]]), w.fleet(), w.cfg, { leaderSinceMs: -1e9, pools: { "m/aggregated": { samples: [{ atMs: 0, need: 0 }], samplingSinceMs: 0, lastUpMs: null, lastDownMs: null, idleSinceMs: null } } });
    expect(d.actions).toEqual([{ kind: "drain", pool: "m/aggregated", engine: "p1" }]);
  });

  test("more load never asks for fewer engines; the same inputs give the same decision", () => {
    let prev = 0;
    for (const x of [0, 0.3, 1, 1.2, 2.5, 4, 7.9, 20]) {
      const d = decide(10_000, 0, new Map([["m/aggregated", load(x)]]), { engines: [], hosts: [{ name: "h", gpusTotal: 64, gpusFree: 64, backoffUntilMs: 0 }] }, config([pool({ max: 64 })]), initialMemory(0));
      expect(d.pools[0]!.desired).toBeGreaterThanOrEqual(prev);
      prev = d.pools[0]!.desired;
      const again = decide(10_000, 0, new Map([["m/aggregated", load(x)]]), { engines: [], hosts: [{ name: "h", gpusTotal: 64, gpusFree: 64, backoffUntilMs: 0 }] }, config([pool({ max: 64 })]), initialMemory(0));
      expect(again).toEqual(d);
    }
  });

  test("time-of-day floors and pins are inputs, not fights", () => {
    const floors = [{ fromS: 8 * 3600, toS: 20 * 3600, min: 2 }];
    const fleet: Fleet = { engines: [], hosts: [{ name: "h", gpusTotal: 8, gpusFree: 8, backoffUntilMs: 0 }] };
    const at = (hour: number, p: PoolSpec) => decide(1, hour * 3600, new Map([["m/aggregated", ZERO]]), fleet, config([p]), initialMemory(0)).pools[0]!;
    expect(at(9, pool({ floors })).desired).toBe(2);
    expect(at(9, pool({ floors })).reason).toBe("scale_up");
    expect(at(22, pool({ floors })).desired).toBe(0);
    expect(at(22, pool({ pinned: 3 }))).toMatchObject({ desired: 3, reason: "pinned" });
  });
});
