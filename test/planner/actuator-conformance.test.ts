// One conformance suite for the Actuator seam, run over every implementation: the LocalActuator over
// a fake supervisor on the virtual clock, and over the real Supervisor with sim engine processes.
// (The cluster's remote actuator joins this list when it lands.)
import { afterAll, describe, expect, test } from "bun:test";
import { RealClock, VirtualClock, type Clock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import type { Config } from "../../src/config/types.ts";
import { Supervisor } from "../../src/engine/supervisor.ts";
import type { Actuator } from "../../src/planner/actuator.ts";
import { LocalActuator, type ScalableSupervisor } from "../../src/planner/actuator-local.ts";
import type { EngineState } from "../../src/planner/types.ts";
import { engine, randomPortStart, testConfig } from "../fixtures/engines/config.ts";
import { FakeSupervisor } from "./fake-supervisor.ts";

const POOL = "m/aggregated";

function config(): Config {
  const c = testConfig({ engines: [engine({ kind: "sim", count: 2, args: ["--zero-delay"], env: { HERD_SUPERVISOR_PID: "" } })], supervisor: { port_range_start: randomPortStart() } });
  c.planner = { ...c.planner, enabled: true, pools: [{ engine: 0, min: 0, max: 2, prefill_tokens_per_s: 1_000, decode_tokens_per_s: 100, can_sleep: true, floors: [], pin: -1 }] };
  return c;
}

interface Harness {
  actuator: Actuator;
  inFlight: Map<string, number>;
  /** Let time pass until `cond` holds (virtual: advance the clock; real: poll). */
  until(cond: () => boolean, ms: number): Promise<void>;
  close(): Promise<void>;
}

function build(sup: (c: Config, clock: Clock) => ScalableSupervisor & { start?: () => Promise<void>; stop?: (o: { drainMs: number }) => Promise<void> }, clock: Clock, virtual: boolean) {
  return async (): Promise<Harness> => {
    const c = config();
    const s = sup(c, clock);
    await s.start?.();
    const inFlight = new Map<string, number>();
    const actuator = new LocalActuator({ config: c, supervisor: s, clock, log: memoryLogger(), inFlight: (id) => inFlight.get(id) ?? 0, hostGpus: 0 });
    return {
      actuator, inFlight,
      async until(cond, ms) {
        for (let t = 0; t < ms && !cond(); t += 50) {
          if (virtual) (clock as VirtualClock).advance(50);
          await Bun.sleep(virtual ? 0 : 50);
        }
        expect(cond()).toBe(true);
      },
      close: async () => void (await s.stop?.({ drainMs: 0 })),
    };
  };
}

const IMPLEMENTATIONS: [string, () => Promise<Harness>][] = [
  ["local over a fake supervisor (virtual clock)", build((c, clock) => new FakeSupervisor(c, clock), new VirtualClock(0), true)],
  ["local over the real supervisor (sim engine processes)", build((c, clock) => new Supervisor({ config: c, clock, logger: memoryLogger() }), new RealClock(), false)],
];

const harnesses: Harness[] = [];
afterAll(async () => {
  await Promise.all(harnesses.map((h) => h.close()));
});

describe.each(IMPLEMENTATIONS)("Actuator conformance: %s", (_name, make) => {
  const stateOf = (h: Harness, id: string): EngineState | undefined => h.actuator.fleet().engines.find((e) => e.id === id)?.state;

  test("start → starting → ready; the start time is measured; sleep/wake; busy stop only drains; idempotent", async () => {
    const h = await make();
    harnesses.push(h);
    expect(h.actuator.fleet().engines).toEqual([]);
    expect(h.actuator.predictReadyMs(POOL)).toBeNull();
    const r = await h.actuator.act({ kind: "start", pool: POOL, host: "n1" });
    expect(r.ok).toBe(true);
    const id = r.engine!;
    expect(stateOf(h, id)).toBe("starting");
    await h.until(() => stateOf(h, id) === "ready", 15_000);
    expect(h.actuator.predictReadyMs(POOL)).toBe(0);

    expect(await h.actuator.act({ kind: "sleep", pool: POOL, engine: id })).toEqual({ ok: true, engine: id });
    expect(stateOf(h, id)).toBe("sleeping");
    expect(h.actuator.predictReadyMs(POOL)).not.toBeNull(); // a cold start measured: a bound exists
    const waking = h.actuator.act({ kind: "wake", pool: POOL, engine: id });
    expect(await h.actuator.act({ kind: "wake", pool: POOL, engine: id })).toMatchObject({ ok: true, skipped: "wake under way" });
    await h.until(() => stateOf(h, id) === "ready", 5_000);
    expect((await waking).ok).toBe(true);

    h.inFlight.set(id, 1);
    expect(await h.actuator.act({ kind: "stop", pool: POOL, engine: id })).toMatchObject({ ok: true, skipped: "requests in flight: drained instead" });
    expect(stateOf(h, id)).toBe("draining");
    h.inFlight.set(id, 0);
    expect(await h.actuator.act({ kind: "stop", pool: POOL, engine: id })).toEqual({ ok: true, engine: id });
    expect(stateOf(h, id)).toBe("stopped");
    expect(await h.actuator.act({ kind: "stop", pool: POOL, engine: "n1/none" })).toMatchObject({ ok: true, skipped: "unknown engine" });
    expect(await h.actuator.act({ kind: "start", pool: "other/aggregated", host: "n1" })).toMatchObject({ ok: false });
  }, 40_000);
});
