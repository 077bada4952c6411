// SLA mode on the real PlannerService + LocalActuator (a fake supervisor, the virtual clock): a
// P/D pair of sim entries is sized per phase for a load change — a prompt-heavy load grows the
// prefill pool and leaves decode at one engine; a decode-heavy load grows the decode pool, and the
// prefill pool comes down after its down window. The reasons explain it in GET /admin/planner.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { LocalActuator } from "../../src/planner/actuator-local.ts";
import { PlannerService } from "../../src/planner/service.ts";
import { engine, testConfig } from "../fixtures/engines/config.ts";
import { memoryLogger } from "../helpers/log.ts";
import { FakeSupervisor } from "./fake-supervisor.ts";

describe("SLA mode scales a P/D pair", () => {
  test("prefill and decode separately, for a load change", async () => {
    const config = testConfig({ engines: [engine({ kind: "sim", count: 0, role: "prefill" }), engine({ kind: "sim", count: 0, role: "decode" })] });
    const pool = (e: number) => ({ engine: e, min: 1, max: 12, prefill_tokens_per_s: 1, decode_tokens_per_s: 1, can_sleep: false, floors: [], pin: -1 });
    config.planner = {
      ...config.planner, enabled: true, tick_ms: 1_000, stable_window_ms: 5_000, panic_window_ms: 2_000, down_window_ms: 20_000, down_step_ms: 5_000, up_hold_ms: 5_000,
      idle_to_sleep_ms: 600_000, pools: [pool(0), pool(1)],
      slo: { ttft_ms: 500, itl_ms: 25, profile: "", horizon_ms: 10_000, correction_ewma: 0.2, correction_max: 3 },
    };
    const clock = new VirtualClock(0);
    const log = memoryLogger();
    const sup = new FakeSupervisor(config, clock);
    const actuator = new LocalActuator({ config, supervisor: sup, clock, log, inFlight: () => 0, hostGpus: 0 });
    const planner = new PlannerService({ config, clock, log, actuator, timeOfDayS: () => 0 });
    planner.start();
    const model = config.engines[0]!.model;
    const P = `${model}/prefill`;
    const D = `${model}/decode`;
    const status = () => Object.fromEntries(planner.status().pools.map((p) => [p.pool, p]));
    /** `seconds` of `rps` requests per second, each `isl` prompt tokens asking for `osl` tokens, 100 ms at a time. */
    const load = async (seconds: number, rps: number, isl: number, osl: number) => {
      let due = 0;
      for (let t = 0; t < seconds * 10; t++) {
        due += rps / 10;
        for (; due >= 1; due--) for (const p of planner.poolsFor(model)) planner.recordArrival(p, isl, osl);
        clock.advance(100);
        await Bun.sleep(0);
      }
    };
    const ready = (pool: string) => [...sup.engines.values()].filter((e) => e.entry === (pool === P ? 0 : 1) && e.phase !== "stopped").length;

    // Light load: one engine each (the pools' min).
    await load(30, 1, 2_000, 100);
    expect(status()[P]!.desired).toBe(1);
    expect(status()[D]!.desired).toBe(1);

    // Prompt-heavy: 10 req/s of 8000-token prompts = 80k prompt tokens/s; ~25k per engine at a
    // 500 ms mean TTFT → 4 prefill engines; 1000 decode tokens/s fit one decode engine at 25 ms.
    await load(30, 10, 8_000, 100);
    let s = status();
    expect(s[P]!.desired).toBeGreaterThanOrEqual(4);
    expect(s[P]!.desired).toBeLessThanOrEqual(6);
    expect(s[D]!.desired).toBe(1);
    expect(ready(P)).toBe(s[P]!.desired!);
    expect(ready(D)).toBe(1);
    expect(s[P]!.explain).toMatch(/predicted (9\.9\d|10\.0\d?) req\/s .*ISL 8000.*per engine at TTFT 500 ms.* = [\d.]+ engines; prefill → [\d.]+ engines/);
    const prefillPeak = s[P]!.desired!;

    // Decode-heavy: 2 req/s of 500-token prompts asking for 8000 tokens = 16k decode tokens/s at
    // context 4500 → ~73 sequences per engine at 25 ms → 6 decode engines; prompts need one.
    await load(15, 2, 500, 8_000);
    s = status();
    expect(s[D]!.desired).toBeGreaterThanOrEqual(5);
    expect(s[D]!.desired).toBeLessThanOrEqual(8);
    expect(s[P]!.desired).toBeLessThanOrEqual(prefillPeak); // no growth from decode work
    // The prefill pool comes down one engine at a time after its down window, to what prompts need.
    await load(90, 2, 500, 8_000);
    s = status();
    expect(s[P]!.desired).toBe(1);
    expect(s[D]!.desired).toBeGreaterThanOrEqual(5);
    expect(ready(D)).toBe(s[D]!.desired!);
    expect(s[D]!.explain).toMatch(/decode 16\.0k tok\/s ÷ [\d.]+ tok\/s per engine at ITL 25 ms .*context 4500 \(batch \d+\) = [\d.]+ engines; decode → [\d.]+ engines/);
    await planner.stop();
  });
});
