// PlannerService + LocalActuator on the virtual clock (a fake supervisor): wake on request, release
// of held requests when an engine is ready, scale-up under a burst, idle → sleep → stop, never a
// stop of a busy engine, dry run, metrics and the /admin/planner JSON.
import { describe, expect, test } from "bun:test";
import { Registry } from "prom-client";
import { VirtualClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import type { Config } from "../../src/config/types.ts";
import { LocalActuator } from "../../src/planner/actuator-local.ts";
import { PlannerMetrics } from "../../src/planner/metrics.ts";
import { PlannerService } from "../../src/planner/service.ts";
import { plannerRoute } from "../../src/planner/status.ts";
import { engine, testConfig } from "../fixtures/engines/config.ts";
import { FakeSupervisor } from "./fake-supervisor.ts";

const POOL = "m/aggregated";

function plannerConfig(over: Partial<Config["planner"]> = {}, pool: Partial<Config["planner"]["pools"][number]> = {}): Config {
  const c = testConfig({ engines: [engine({ kind: "sim", count: 2 })] });
  c.planner = {
    ...c.planner, enabled: true, tick_ms: 1_000, stable_window_ms: 5_000, panic_window_ms: 2_000, down_window_ms: 20_000, down_step_ms: 5_000,
    up_hold_ms: 5_000, idle_to_sleep_ms: 15_000, sleep_to_stop_ms: 30_000, hold_max: 8, hold_timeout_ms: 60_000, ...over,
    pools: [{ engine: 0, min: 0, max: 2, prefill_tokens_per_s: 1_000, decode_tokens_per_s: 100, can_sleep: true, floors: [], pin: -1, ...pool }],
  };
  return c;
}

function setup(config = plannerConfig()) {
  const clock = new VirtualClock(0);
  const log = memoryLogger();
  const sup = new FakeSupervisor(config, clock);
  const inFlight = new Map<string, number>();
  const actuator = new LocalActuator({ config, supervisor: sup, clock, log, inFlight: (id) => inFlight.get(id) ?? 0, hostGpus: 0 });
  const registry = new Registry();
  const planner = new PlannerService({ config, clock, log, actuator, metrics: new PlannerMetrics(registry), timeOfDayS: () => 0 });
  planner.start();
  /** Advance the virtual clock in small steps, letting promises settle between them. */
  const run = async (ms: number, stepMs = 100) => {
    for (let t = 0; t < ms; t += stepMs) {
      clock.advance(stepMs);
      await Bun.sleep(0);
    }
  };
  return { clock, log, sup, inFlight, actuator, planner, registry, run };
}

const states = (sup: FakeSupervisor) => [...sup.engines.values()].map((e) => (e.phase === "ready" ? (e.sleep !== "awake" ? e.sleep : e.cordoned ? "draining" : "ready") : e.phase));

describe("planner service", () => {
  test("a held request wakes the planner at once, is released when the engine is ready; idle → sleep → stop", async () => {
    const { planner, sup, run, clock, registry } = setup();
    await run(3_000);
    expect(sup.calls).toEqual([]); // nothing asked, nothing started
    const t0 = clock.now();
    planner.recordArrival(POOL, 100, 16);
    const released = planner.hold.hold(POOL, { bytes: 100, promptTokens: 100 });
    clock.advance(0);
    await Bun.sleep(0);
    expect(sup.calls).toEqual(["add 0"]); // the poke ran a tick without waiting for the timer
    let outcome = null as string | null;
    void released.then((o) => (outcome = o));
    const st = planner.status();
    expect(st.pools[0]!.held.requests).toBe(1);
    expect(st.pools[0]!.actual.starting).toBe(1);
    await run(5_000);
    expect(outcome).toBe("release");
    expect(clock.now() - t0).toBeLessThanOrEqual(5_100);
    // Measured cold start predicts the next wait.
    expect(planner.status().pools[0]!.predicted_ready_ms).toBe(0);
    // Idle: asleep after idle_to_sleep_ms, stopped after sleep_to_stop_ms more.
    await run(16_000);
    expect(states(sup)).toEqual(["sleeping"]);
    await run(31_000);
    expect(states(sup)).toEqual(["stopped"]);
    const text = await registry.metrics();
    expect(text).toContain('herd_planner_actions_total{pool="m/aggregated",kind="start",outcome="ok"} 1');
    expect(text).toContain('herd_planner_actions_total{pool="m/aggregated",kind="sleep",outcome="ok"} 1');
    expect(text).toContain('herd_planner_ticks_total{trigger="poke"} 1');
    expect(text).toMatch(/herd_planner_decisions_total\{pool="m\/aggregated",reason="sleep_idle"\} 1/);
  });

  test("a request for a sleeping pool wakes an engine instead of a cold start", async () => {
    const { planner, sup, run } = setup();
    void planner.hold.hold(POOL, { bytes: 1, promptTokens: 10 });
    await run(22_000);
    expect(states(sup), sup.calls.join(",") + JSON.stringify(planner.status().recent_actions)).toEqual(["sleeping"]);
    let outcome = null as string | null;
    void planner.hold.hold(POOL, { bytes: 1, promptTokens: 10 }).then((o) => (outcome = o));
    await run(600);
    expect(sup.calls.filter((c) => c.startsWith("add"))).toHaveLength(1);
    expect(sup.calls.at(-1)).toMatch(/^wake /);
    expect(outcome).toBe("release");
  });

  test("a burst scales up to max, counting engines already starting", async () => {
    const { planner, sup, run } = setup();
    for (let i = 0; i < 40; i++) planner.recordArrival(POOL, 200, 10); // 8000 prompt tokens/s at 1000 capacity
    await run(1_000);
    expect(sup.calls).toEqual(["add 0", "add 0"]);
    for (let s = 0; s < 4; s++) {
      for (let i = 0; i < 40; i++) planner.recordArrival(POOL, 200, 10);
      await run(1_000);
    }
    await run(1_500);
    expect(sup.calls).toEqual(["add 0", "add 0"]); // max 2, and no cascade while they start
    expect(states(sup)).toEqual(["ready", "ready"]);
  });

  test("the actuator never stops an engine with requests in flight: it drains it", async () => {
    const { actuator, sup, inFlight, run } = setup();
    const r = await actuator.act({ kind: "start", pool: POOL, host: "n1" });
    await run(5_000);
    inFlight.set(r.engine!, 2);
    const stop = await actuator.act({ kind: "stop", pool: POOL, engine: r.engine! });
    expect(stop).toEqual({ ok: true, engine: r.engine, skipped: "requests in flight: drained instead" });
    expect(states(sup)).toEqual(["draining"]);
    expect(actuator.fleet().engines[0]!.state).toBe("draining");
    inFlight.set(r.engine!, 0);
    expect(await actuator.act({ kind: "stop", pool: POOL, engine: r.engine! })).toEqual({ ok: true, engine: r.engine });
    expect(states(sup)).toEqual(["stopped"]);
    expect(await actuator.act({ kind: "sleep", pool: POOL, engine: "nope" })).toEqual({ ok: true, engine: "nope", skipped: "unknown engine" });
  });

  test("one action in flight per engine: a second wake while waking is skipped", async () => {
    const { actuator, sup, run } = setup();
    const r = await actuator.act({ kind: "start", pool: POOL, host: "n1" });
    await run(5_000);
    await actuator.act({ kind: "sleep", pool: POOL, engine: r.engine! });
    const first = actuator.act({ kind: "wake", pool: POOL, engine: r.engine! });
    expect(await actuator.act({ kind: "wake", pool: POOL, engine: r.engine! })).toMatchObject({ skipped: "wake under way" });
    await run(600);
    expect(await first).toEqual({ ok: true, engine: r.engine });
    expect(sup.calls.filter((c) => c.startsWith("wake"))).toHaveLength(1);
    expect(actuator.measurements(POOL).wake_ms).toBe(500);
  });

  test("a failed start backs the host off (no start storm)", async () => {
    const { planner, sup, run, actuator } = setup();
    sup.failNextAdd = true;
    void planner.hold.hold(POOL, { bytes: 1, promptTokens: 1 });
    await run(200);
    expect(sup.calls).toEqual(["add 0"]);
    expect(actuator.fleet().hosts[0]!.backoffUntilMs).toBeGreaterThan(0);
    await run(2_000);
    expect(sup.calls.length).toBeGreaterThanOrEqual(2); // retried after the backoff (restart_backoff_initial_ms)
    expect(planner.status().recent_actions[0]).toMatchObject({ kind: "start", outcome: "failed", detail: "no free port" });
  });

  test("dry run logs the actions and touches nothing", async () => {
    const { planner, sup, run, log } = setup(plannerConfig({ dry_run: true }));
    void planner.hold.hold(POOL, { bytes: 1, promptTokens: 1 });
    await run(1_000);
    expect(sup.calls).toEqual([]);
    expect(log.lines.some((l) => l.includes("planner (dry run) would start m/aggregated on n1"))).toBe(true);
    expect(planner.status().recent_actions[0]).toMatchObject({ outcome: "dry_run", kind: "start" });
  });

  test("GET /admin/planner: desired vs actual, reason, terms, held", async () => {
    const { planner, run } = setup(plannerConfig({}, { min: 1 }));
    await run(6_000);
    const body = (await (await plannerRoute(planner)(new Request("http://x/admin/planner"))).json()) as ReturnType<PlannerService["status"]>;
    expect(body.enabled).toBe(true);
    expect(body.pools[0]).toMatchObject({ pool: POOL, entry: 0, desired: 1, actual: { ready: 1 }, held: { requests: 0 } });
    expect(body.pools[0]!.terms.floor).toBe(1);
    expect(body.pools[0]!.engines[0]).toMatchObject({ state: "ready", in_flight: 0 });
    expect(planner.poolFor("m")).toBe(POOL);
    expect(planner.poolFor("other")).toBeNull();
    await planner.stop();
  });
});
