// The supervisor's pure lifecycle, run through the runner on a VirtualClock with fake processes.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { backoffMs, DRAIN_MIGRATE_SETTLE_MS, workerState } from "../../src/engine/machine.ts";
import type { MachinePolicy, MachineState } from "../../src/engine/machine.ts";
import { MachineRunner } from "../../src/engine/runner.ts";
import type { ProbeResult } from "../../src/engine/runner.ts";

const policy: MachinePolicy = {
  managed: true,
  health_interval_ms: 1_000,
  startup_timeout_ms: 30_000,
  unhealthy_threshold: 3,
  restart_backoff_initial_ms: 1_000,
  restart_backoff_max_ms: 60_000,
  max_restarts: 10,
  restart_reset_ms: 120_000,
  stop_timeout_ms: 5_000,
};

/** A fake engine: records spawns and signals; health answers come from `healthy`. */
function harness(p: MachinePolicy = policy) {
  const clock = new VirtualClock();
  const h = {
    clock,
    spawnsAtMs: [] as number[],
    signals: [] as string[],
    healthy: false,
    inFlight: 0,
    alive: false,
    spawnThrows: false,
    /** When set, every spawned process exits with code 1 this long after its spawn. */
    crashAfterMs: null as number | null,
    states: [] as string[],
    logs: [] as string[],
    /** Clock times the drain deadline's migration ran; what is left in flight after it. */
    migrations: [] as number[],
    leftAfterMigration: 0,
    runner: undefined as unknown as MachineRunner,
  };
  h.runner = new MachineRunner(p, clock, {
    spawn() {
      if (h.spawnThrows) throw new Error("ENOENT");
      h.spawnsAtMs.push(clock.now());
      h.alive = true;
      if (h.crashAfterMs !== null) clock.setTimer(h.crashAfterMs, () => exit(h, 1));
    },
    signal(sig) {
      h.signals.push(sig);
    },
    probe: () => Promise.resolve<ProbeResult>(h.alive && h.healthy ? { ok: true } : { ok: false, detail: "refused" }),
    inFlight: () => h.inFlight,
    migrate() {
      h.migrations.push(clock.now());
      h.inFlight = h.leftAfterMigration;
    },
    log: (_l, msg) => void h.logs.push(msg),
    changed(prev: MachineState, next: MachineState) {
      if (workerState(prev) !== workerState(next) || h.states.length === 0) h.states.push(workerState(next));
    },
  });
  return h;
}
type H = ReturnType<typeof harness>;

/** Advance virtual time in steps, letting probe promises settle between timers. */
async function run(h: H, ms: number, stepMs = 100): Promise<void> {
  const end = h.clock.now() + ms;
  while (h.clock.now() < end) {
    h.clock.advance(Math.min(stepMs, end - h.clock.now()));
    for (let i = 0; i < 3; i++) await Promise.resolve();
  }
}

function exit(h: H, code: number | null = 1, signal: string | null = null) {
  h.alive = false;
  h.runner.dispatch({ type: "exited", code, signal });
}

describe("backoff", () => {
  test("doubles from the initial delay up to the cap", () => {
    const seq = Array.from({ length: 10 }, (_, i) => backoffMs(policy, i + 1));
    expect(seq).toEqual([1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 60_000, 60_000, 60_000, 60_000]);
    expect(backoffMs(policy, 10_000)).toBe(60_000);
  });

  test("a crash loop restarts after 1, 2, 4 … ≤ 60 s and ends in failed", async () => {
    const h = harness();
    h.crashAfterMs = 0;
    h.runner.dispatch({ type: "start" });
    while (h.runner.state.phase !== "failed" && h.clock.now() < 3_600_000) h.clock.step();
    const gaps = h.spawnsAtMs.slice(1).map((t, i) => t - h.spawnsAtMs[i]!);
    expect(gaps).toEqual([1, 2, 4, 8, 16, 32, 60, 60, 60, 60].map((s) => s * 1_000));
    expect(h.runner.state.phase).toBe("failed");
    expect(h.runner.state.restarts).toBe(10);
    expect(h.states.at(-1)).toBe("failed");
    const spawns = h.spawnsAtMs.length;
    await run(h, 300_000, 10_000);
    expect(h.spawnsAtMs.length).toBe(spawns); // failed is final until a manual restart
    h.runner.dispatch({ type: "restart" });
    expect(h.spawnsAtMs.length).toBe(spawns + 1);
    expect(h.runner.state.crashes).toBe(0);
  });

  test("staying ready for restart_reset_ms resets the crash count", async () => {
    const h = harness();
    h.healthy = true;
    h.runner.dispatch({ type: "start" });
    await run(h, 2_000);
    exit(h);
    await run(h, 1_500);
    exit(h);
    expect(h.runner.state.crashes).toBe(2);
    await run(h, 3_000);
    expect(h.runner.state.phase).toBe("ready");
    await run(h, policy.restart_reset_ms);
    exit(h);
    expect(h.runner.state.crashes).toBe(1);
    expect(h.runner.state.phase).toBe("backoff");
  });

  test("a spawn that throws counts as a crash", async () => {
    const h = harness();
    h.spawnThrows = true;
    h.runner.dispatch({ type: "start" });
    expect(h.runner.state.phase).toBe("backoff");
    expect(h.runner.state.crashes).toBe(1);
  });
});

describe("health", () => {
  test("ready only after a healthy probe; unhealthy after the threshold; back when healthy", async () => {
    const h = harness();
    h.runner.dispatch({ type: "start" });
    await run(h, 5_000);
    expect(workerState(h.runner.state)).toBe("starting");
    h.healthy = true;
    await run(h, 1_100);
    expect(h.runner.state.phase).toBe("ready");
    h.healthy = false;
    await run(h, 2_050);
    expect(h.runner.state.phase).toBe("ready"); // two failures < threshold 3
    await run(h, 1_000);
    expect(h.runner.state.phase).toBe("unhealthy");
    expect(workerState(h.runner.state)).toBe("starting");
    h.healthy = true;
    await run(h, 1_100);
    expect(h.runner.state.phase).toBe("ready");
    expect(h.states).toEqual(["starting", "ready", "starting", "ready"]);
    expect(h.spawnsAtMs.length).toBe(1); // an unhealthy engine is not restarted
  });

  test("startup timeout kills (TERM, then KILL) and restarts", async () => {
    const h = harness();
    h.runner.dispatch({ type: "start" });
    await run(h, policy.startup_timeout_ms + 100);
    expect(h.signals).toEqual(["SIGTERM"]);
    await run(h, policy.stop_timeout_ms);
    expect(h.signals).toEqual(["SIGTERM", "SIGKILL"]);
    exit(h, null, "SIGKILL");
    expect(h.runner.state.phase).toBe("backoff");
    await run(h, 1_100);
    expect(h.spawnsAtMs.length).toBe(2);
  });

  test("a stale probe answer from a previous process is ignored", async () => {
    const h = harness();
    let answer: ((r: ProbeResult) => void) | undefined;
    const runner = new MachineRunner(policy, h.clock, {
      spawn() {},
      signal() {},
      probe: () => new Promise<ProbeResult>((r) => (answer = r)),
      inFlight: () => 0,
      log() {},
      changed() {},
    });
    runner.dispatch({ type: "start" });
    await run(h, 1_100);
    runner.dispatch({ type: "exited", code: 1, signal: null });
    answer?.({ ok: true });
    await Promise.resolve();
    expect(runner.state.phase).toBe("backoff");
  });
});

describe("stop", () => {
  test("drains until in-flight reaches zero, then TERM, KILL after stop_timeout", async () => {
    const h = harness();
    h.healthy = true;
    h.runner.dispatch({ type: "start" });
    await run(h, 1_100);
    h.inFlight = 2;
    h.runner.dispatch({ type: "stop", drainMs: 10_000 });
    expect(workerState(h.runner.state)).toBe("draining");
    await run(h, 3_000);
    expect(h.signals).toEqual([]);
    h.inFlight = 0;
    await run(h, 100);
    expect(h.signals).toEqual(["SIGTERM"]);
    await run(h, policy.stop_timeout_ms);
    expect(h.signals).toEqual(["SIGTERM", "SIGKILL"]);
    exit(h, null, "SIGKILL");
    expect(h.runner.state.phase).toBe("stopped");
    expect(h.spawnsAtMs.length).toBe(1);
  });

  test("the drain bound is respected when requests never finish", async () => {
    const h = harness();
    h.healthy = true;
    h.runner.dispatch({ type: "start" });
    await run(h, 1_100);
    h.inFlight = 5;
    const t0 = h.clock.now();
    h.runner.dispatch({ type: "stop", drainMs: 2_000 });
    while (h.signals.length === 0) await run(h, 10, 10);
    expect(h.clock.now() - t0).toBe(2_000);
  });

  test("at the drain deadline the requests in flight migrate first; the engine stops once they left, or after the settle bound", async () => {
    for (const left of [0, 3]) {
      const h = harness({ ...policy, migrateAtDrainDeadline: true });
      h.healthy = true;
      h.runner.dispatch({ type: "start" });
      await run(h, 1_100);
      h.inFlight = 5;
      h.leftAfterMigration = left;
      const t0 = h.clock.now();
      h.runner.dispatch({ type: "stop", drainMs: 2_000 });
      while (h.signals.length === 0) await run(h, 10, 10);
      expect(h.migrations).toEqual([t0 + 2_000]);
      // Moved at once: the stop follows within a poll; some never leave: the settle bound ends the wait.
      if (left === 0) expect(h.clock.now() - t0).toBeLessThanOrEqual(2_000 + 100);
      else expect(h.clock.now() - t0).toBe(2_000 + DRAIN_MIGRATE_SETTLE_MS);
    }
    // A stop without a drain (herd's own exit after its frontend drained) moves nothing.
    const h = harness({ ...policy, migrateAtDrainDeadline: true });
    h.healthy = true;
    h.runner.dispatch({ type: "start" });
    await run(h, 1_100);
    h.inFlight = 1;
    h.runner.dispatch({ type: "stop", drainMs: 0 });
    await run(h, 100, 10);
    expect(h.migrations).toEqual([]);
    expect(h.signals).toEqual(["SIGTERM"]);
  });

  test("stop during backoff stops at once; an external worker stops without signals", async () => {
    const h = harness();
    h.runner.dispatch({ type: "start" });
    exit(h);
    h.runner.dispatch({ type: "stop", drainMs: 1_000 });
    expect(h.runner.state.phase).toBe("stopped");
    await run(h, 10_000);
    expect(h.spawnsAtMs.length).toBe(1);

    const e = harness({ ...policy, managed: false });
    e.alive = true;
    e.healthy = true;
    e.runner.dispatch({ type: "start" });
    await run(e, 100);
    expect(e.runner.state.phase).toBe("ready");
    e.runner.dispatch({ type: "stop", drainMs: 1_000 });
    await run(e, 100);
    expect(e.runner.state.phase).toBe("stopped");
    expect(e.spawnsAtMs).toEqual([]);
    expect(e.signals).toEqual([]);
  });

  test("manual restart of a live engine is not a crash", async () => {
    const h = harness();
    h.healthy = true;
    h.runner.dispatch({ type: "start" });
    await run(h, 1_100);
    h.runner.dispatch({ type: "restart" });
    expect(h.signals).toEqual(["SIGTERM"]);
    exit(h, 0);
    expect(h.runner.state.phase).toBe("starting");
    expect(h.runner.state.crashes).toBe(0);
    expect(h.runner.state.restarts).toBe(1);
    expect(h.spawnsAtMs.length).toBe(2);
  });
});
