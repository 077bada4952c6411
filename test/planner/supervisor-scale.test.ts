// The supervisor's scaling API (the planner's local actuator) with real sim engine processes: add an
// engine to a planner pool that started at zero, sleep and wake it (vLLM's /sleep and /wake_up,
// mimicked by the sim engine: asleep it refuses generation), drain and stop it, reuse its slot.
import { afterEach, describe, expect, test } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { Supervisor } from "../../src/engine/supervisor.ts";
import { isRunning } from "../../src/engine/procfs.ts";
import type { Config } from "../../src/config/types.ts";
import { engine, randomPortStart, testConfig } from "../fixtures/engines/config.ts";

const running: Supervisor[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.stop({ drainMs: 0 })));
});

export function plannerSimConfig(opts: { canSleep: boolean; min?: number; max?: number }): Config {
  const c = testConfig({ engines: [engine({ kind: "sim", count: 4, args: ["--zero-delay"], env: { HERD_SUPERVISOR_PID: "" } })], supervisor: { port_range_start: randomPortStart() } });
  c.planner = { ...c.planner, enabled: true, pools: [{ engine: 0, min: opts.min ?? 0, max: opts.max ?? 2, prefill_tokens_per_s: 40_000, decode_tokens_per_s: 3_000, can_sleep: opts.canSleep, floors: [], pin: -1 }] };
  return c;
}

const complete = (url: string) =>
  fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt: "hello there", max_tokens: 4 }) });

describe("supervisor scaling", () => {
  test("a planner pool with min 0 starts empty; add, sleep, wake, drain, remove, reuse", async () => {
    const config = plannerSimConfig({ canSleep: true });
    let inFlight = 0;
    const sup = new Supervisor({ config, clock: new RealClock(), logger: memoryLogger(), inFlight: () => inFlight });
    running.push(sup);
    const added: string[] = [];
    sup.onAdded((p) => added.push(p.id));
    await sup.start();
    expect(sup.list()).toEqual([]);

    const id = sup.addEngine(0);
    expect(added).toEqual([id]);
    expect(sup.list().map((w) => w.state)).toEqual(["starting"]);
    const w = await sup.waitFor(id, ["ready"], 15_000);
    expect(sup.status()[0]!.plan.spec!.argv).toContain("--enable-sleep-mode");
    expect((await complete(w.url)).status).toBe(200);

    inFlight = 1;
    await expect(sup.sleepEngine(id)).rejects.toThrow(/in flight/);
    expect(sup.list()[0]!.state).toBe("ready");
    inFlight = 0;
    await sup.sleepEngine(id);
    expect(sup.status()[0]!.sleep).toBe("sleeping");
    expect(sup.list()[0]!.state).toBe("draining"); // out of rotation
    expect((await complete(w.url)).status).toBe(503);
    await sup.wakeEngine(id);
    expect(sup.list()[0]!.state).toBe("ready");
    expect((await complete(w.url)).status).toBe(200);

    const second = sup.addEngine(0);
    expect(second).not.toBe(id);
    const w2 = await sup.waitFor(second, ["ready"], 15_000);
    expect(w2.url).not.toBe(w.url);

    const pid = sup.status().find((s) => s.worker.id === id)!.pid!;
    sup.drainEngine(id);
    expect(sup.list().find((x) => x.id === id)!.state).toBe("draining");
    await sup.removeEngine(id, { drainMs: 0 });
    expect(sup.list().find((x) => x.id === id)!.state).toBe("stopped");
    expect(isRunning(pid)).toBe(false);

    // The stopped slot is reused: same id, a new process.
    expect(sup.addEngine(0)).toBe(id);
    await sup.waitFor(id, ["ready"], 15_000);
    expect(sup.status().find((s) => s.worker.id === id)!.pid).not.toBe(pid);
    expect(sup.list()).toHaveLength(2);
  }, 60_000);

  test("without the planner an entry starts its count; kinds without a sleep mode refuse to sleep", async () => {
    const config = testConfig({ engines: [engine({ kind: "command", command: [process.execPath, "test/fixtures/engines/fake-engine.ts", "--host", "{host}", "--port", "{port}"] })], supervisor: { port_range_start: randomPortStart() } });
    const sup = new Supervisor({ config, clock: new RealClock(), logger: memoryLogger() });
    running.push(sup);
    await sup.start();
    const [w] = sup.list();
    await sup.waitFor(w!.id, ["ready"], 10_000);
    await expect(sup.sleepEngine(w!.id)).rejects.toThrow(/no sleep mode/);
    expect(() => sup.addEngine(3)).toThrow(/no engines\[3\]/);
  }, 30_000);
});
