// SLA mode (planner.slo): the load predictor, the online correction (converges, bounded), the
// decision per pool explaining itself term by term, and the config's findings with path and line.
import { describe, expect, test } from "bun:test";
import { parseConfigText } from "../../src/config/index.ts";
import { checkConfigFiles } from "../../src/config/files.ts";
import { checkEngines } from "../../src/engine/check.ts";
import { DEFAULT_FIGURES, decodeCapacity, expectedTtftMs, prefillCapacity } from "../../src/planner/capacity.ts";
import { decide, initialMemory } from "../../src/planner/decide.ts";
import { engineFigures, plannerConfigFrom } from "../../src/planner/from-config.ts";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { TREND_SHARE_MAX, holtForecast, holtUpdate, type Holt } from "../../src/planner/predict.ts";
import { correctionStep, slaDemand, EMPTY_SLA, type SlaMemory } from "../../src/planner/sla.ts";
import type { Fleet, PlannerConfig, PoolSignals, PoolSpec, SloSpec } from "../../src/planner/types.ts";
import { renderPlanner } from "../../src/ops/planner.ts";
import { VirtualClock } from "../../src/core/clock.ts";
import { ClusterPlanning, type NodeSummary } from "../../src/planner/cluster-plan.ts";

const SLO: SloSpec = { ttftMs: 500, itlMs: 25, horizonMs: 60_000, correctionEwma: 0.2, correctionMax: 3 };
const pool = (role: PoolSpec["role"], over: Partial<PoolSpec> = {}): PoolSpec => ({
  id: `m/${role}`, model: "m", role, min: 0, max: 64, gpusPerEngine: 1, capacity: { prefillTokensPerS: 1, decodeTokensPerS: 1 }, canSleep: false, floors: [], pinned: null, ...over,
});
const sig = (rps: number, isl: number, osl: number, over: Partial<PoolSignals> = {}): PoolSignals => ({
  arrivalsPerS: rps, uncachedPrefillTokensPerS: rps * isl, decodeTokensPerS: rps * osl, heldRequests: 0, heldTokens: 0, ...over,
});

describe("load predictor (Holt)", () => {
  const feed = (xs: number[], stepMs = 10_000) => xs.reduce<Holt | null>((h, x, i) => holtUpdate(h, x, i * stepMs), null);

  test("a constant load forecasts itself; nothing seen forecasts NaN", () => {
    expect(holtForecast(feed(Array(20).fill(7)), 60_000)).toBeCloseTo(7, 9);
    expect(holtForecast(null, 60_000)).toBeNaN();
  });

  test("a ramp is led, not lagged: the forecast a minute ahead is above the last window", () => {
    const ramp = Array.from({ length: 40 }, (_, i) => 2 + 0.1 * i); // +0.1 req/s every 10 s
    const h = feed(ramp)!;
    const last = ramp.at(-1)!;
    const ahead = holtForecast(h, 60_000);
    expect(ahead).toBeGreaterThan(last);
    // The ramp's own value a minute later is last + 0.6: within a tenth of it.
    expect(Math.abs(ahead - (last + 0.6))).toBeLessThan(0.1);
  });

  test("the trend's share is bounded, negatives never forecast, bad windows are ignored", () => {
    const jump = feed([1, 1, 1, 50]);
    expect(holtForecast(jump, 3_600_000)).toBeLessThanOrEqual(jump!.level * (1 + TREND_SHARE_MAX) + 1e-9);
    const fall = feed([50, 40, 20, 1, 0]);
    expect(holtForecast(fall, 3_600_000)).toBeGreaterThanOrEqual(0);
    const h = feed([3, 3]);
    expect(holtUpdate(h, NaN, 99_000)).toBe(h);
    expect(holtUpdate(h, -1, 99_000)).toBe(h);
  });
});

describe("online correction", () => {
  test("converges to measured / expected and stays within [1/max, max]", () => {
    let log = 0;
    for (let i = 0; i < 60; i++) log = correctionStep(log, 150, 100, SLO);
    expect(Math.exp(log)).toBeCloseTo(1.5, 3);
    let wild = 0;
    for (let i = 0; i < 60; i++) wild = correctionStep(wild, 1e6, 1, SLO);
    expect(Math.exp(wild)).toBeLessThanOrEqual(SLO.correctionMax);
    expect(Math.exp(wild)).toBeGreaterThan(SLO.correctionMax * 0.999);
    let low = 0;
    for (let i = 0; i < 60; i++) low = correctionStep(low, 1, 1e6, SLO);
    expect(Math.exp(low)).toBeGreaterThanOrEqual(1 / SLO.correctionMax);
    expect(Math.exp(low)).toBeLessThan((1 / SLO.correctionMax) * 1.001);
    // Smoothed: one sample moves it by the EWMA weight only.
    expect(Math.exp(correctionStep(0, 200, 100, SLO))).toBeCloseTo(Math.exp(0.2 * Math.log(2)), 9);
    // No refinement, no samples, unknown expectation: unchanged.
    expect(correctionStep(0.3, 200, 100, { ...SLO, correctionEwma: 0 })).toBe(0.3);
    expect(correctionStep(0.3, NaN, 100, SLO)).toBe(0.3);
    expect(correctionStep(0.3, 200, Infinity, SLO)).toBe(0.3);
  });

  test("a prefill pool whose engines are 1.6× slower than the model learns it and plans for more engines", () => {
    const p = pool("prefill");
    const load = sig(8, 8000, 100);
    let mem: SlaMemory = EMPTY_SLA;
    const first = slaDemand(0, p, { ...load, ttftMsMean: NaN }, SLO, 4, DEFAULT_FIGURES, mem);
    mem = first.memory;
    for (let i = 1; i <= 60; i++) {
      const expected = expectedTtftMs(DEFAULT_FIGURES, 8000, (8 * 8000) / 4);
      mem = slaDemand(i * 10_000, p, { ...load, ttftMsMean: 1.6 * expected }, SLO, 4, DEFAULT_FIGURES, mem).memory;
    }
    const last = slaDemand(610_000, p, { ...load, ttftMsMean: NaN }, SLO, 4, DEFAULT_FIGURES, mem);
    expect(last.terms.ttft_correction).toBeCloseTo(1.6, 2);
    expect(last.demand).toBeCloseTo(first.demand * 1.6, 1);
  });
});

describe("measured latency across the cluster", () => {
  test("the leader takes the window's TTFT and ITL means from every node's latency sums", () => {
    const clock = new VirtualClock(0);
    const cp = new ClusterPlanning({ self: "n1", clock, pools: ["m/aggregated"], leading: () => 1, leader: () => "n1", live: () => ["n1", "n2"], send: async () => ({ ok: false, refused: "no_lease", term: 0 }), staleMs: 30_000, gpusOf: () => 1 });
    const summary = (node: string, n: number, ttftSum: number, itlSum: number): NodeSummary => ({
      node, epoch: `${node}@0`, totals: { "m/aggregated": { arrivals: n, promptTokens: n * 100, decodeTokens: n * 10, ttftCount: n, ttftMsSum: ttftSum, itlCount: n, itlMsSum: itlSum } }, held: {}, engines: [], load: {},
      host: { gpusTotal: 4, gpusFree: 4, backoffUntilMs: 0 }, templates: ["m/aggregated"], latency: null,
    });
    cp.leading();
    cp.ingest(summary("n1", 0, 0, 0));
    cp.ingest(summary("n2", 0, 0, 0));
    clock.advance(10_000);
    // n1: 10 requests at 100 ms TTFT, 20 ms ITL; n2: 30 at 300 ms, 40 ms → means 250 ms and 35 ms.
    cp.ingest(summary("n1", 10, 1_000, 200));
    cp.ingest(summary("n2", 30, 9_000, 1_200));
    const seen = cp.observe(clock.now(), 1);
    if (typeof seen === "string") throw new Error(seen);
    const s = seen.signals.get("m/aggregated")!;
    expect(s.ttftMsMean).toBeCloseTo(250, 9);
    expect(s.itlMsMean).toBeCloseTo(35, 9);
    expect(s.latencySamples).toBe(40);
  });

  test("a window of few finished requests moves the correction less", () => {
    const full = Math.exp(correctionStep(0, 200, 100, SLO, 100));
    const few = Math.exp(correctionStep(0, 200, 100, SLO, 10));
    expect(full).toBeCloseTo(Math.exp(0.2 * Math.log(2)), 9);
    expect(few).toBeGreaterThan(1);
    expect(few - 1).toBeLessThan((full - 1) / 5);
    expect(correctionStep(0.1, 200, 100, SLO, 0)).toBe(0.1);
  });
});

describe("SLA decision per pool", () => {
  const fleet: Fleet = { engines: [], hosts: [{ name: "h", gpusTotal: 64, gpusFree: 64, backoffUntilMs: 0 }] };
  const cfg = (pools: PoolSpec[]): PlannerConfig => ({
    utilizationTarget: 1, downHeadroom: 0.95, stableWindowMs: 60_000, panicWindowMs: 6_000, downWindowMs: 300_000, downStepMs: 120_000, upHoldMs: 30_000,
    idleToSleepMs: 300_000, sleepToStopMs: 1_800_000, gpuBudget: null, pools, slo: SLO,
  });

  test("prefill and decode pools are sized from their own phase; the reason explains term by term", () => {
    const pools = [pool("prefill"), pool("decode")];
    const s = sig(10, 8000, 400);
    const d = decide(0, 0, new Map(pools.map((p) => [p.id, s])), fleet, cfg(pools), initialMemory(0));
    const pre = d.pools.find((p) => p.pool === "m/prefill")!;
    const dec = d.pools.find((p) => p.pool === "m/decode")!;
    const perPrefill = prefillCapacity(DEFAULT_FIGURES, 8000, SLO.ttftMs).tokensPerS;
    const perDecode = decodeCapacity(DEFAULT_FIGURES, 8000 + 200, SLO.itlMs).tokensPerS;
    expect(pre.terms.prefill_engines).toBeCloseTo((10 * 8000) / perPrefill, 2);
    expect(dec.terms.decode_engines).toBeCloseTo((10 * 400) / perDecode, 2);
    expect(pre.desired).toBe(Math.ceil((10 * 8000) / perPrefill));
    expect(dec.desired).toBe(Math.ceil((10 * 400) / perDecode));
    expect(d.actions.filter((a) => a.kind === "start" && a.pool === "m/prefill")).toHaveLength(pre.desired);
    expect(pre.explain).toMatch(/predicted 10\.0 req\/s in 60s \(now 10\.0\), ISL 8000, OSL 400/);
    expect(pre.explain).toMatch(/prefill 80\.0k tok\/s × TTFT correction 1\.00 ÷ [\d.]+k tok\/s per engine at TTFT 500 ms \(ρ 0\.\d\d, idle TTFT 235 ms\) = [\d.]+ engines/);
    expect(pre.explain).toMatch(/prefill → [\d.]+ engines$/);
    expect(dec.explain).toMatch(/decode 4000 tok\/s ÷ [\d.]+ tok\/s per engine at ITL 25 ms ÷ correction 1\.00 = 25\.0 ms, context 8200 \(batch \d+\) = [\d.]+ engines/);
    expect(pre.explain).not.toMatch(/decode/);
    // herd planner status shows it.
    const view = renderPlanner({
      enabled: true, dry_run: false, tick_ms: 5000, ticks: 1, last_tick_ms_ago: 0, held: { requests: 0, bytes: 0 }, recent_actions: [],
      pools: d.pools.map((p, i) => ({ pool: p.pool, entry: i, desired: p.desired, actual: {}, reason: p.reason, terms: p.terms, explain: p.explain, held: { requests: 0, oldest_wait_ms: null }, predicted_ready_ms: null })),
    });
    expect(view).toContain("SLA sizing:");
    expect(view).toContain("m/prefill: predicted 10.0 req/s");
  });

  test("an aggregated pool takes the tighter of the two, its decode side stretched by its own prompts", () => {
    const agg = [pool("aggregated")];
    const s = sig(10, 8000, 400);
    const d = decide(0, 0, new Map([["m/aggregated", s]]), fleet, cfg(agg), initialMemory(0)).pools[0]!;
    const split = decide(0, 0, new Map([["m/prefill", s], ["m/decode", s]]), fleet, cfg([pool("prefill"), pool("decode")]), initialMemory(0)).pools;
    const alone = Math.max(...split.map((p) => (p.terms.prefill_engines ?? p.terms.decode_engines)!));
    expect(d.terms.prompt_share!).toBeGreaterThan(0);
    expect(d.terms.decode_engines!).toBeGreaterThan(split.find((p) => p.pool === "m/decode")!.terms.decode_engines!);
    expect(d.desired).toBeGreaterThanOrEqual(Math.ceil(alone));
    expect(d.explain).toMatch(/aggregated: the tighter of the two → [\d.]+ engines/);
    expect(d.explain).toMatch(/prompts take \d+% of each engine's time/);
  });

  test("an unreachable target is said so, not divided by zero; held requests need an engine", () => {
    const p = [pool("prefill")];
    const tight = { ...cfg(p), slo: { ...SLO, ttftMs: 50 } };
    const d = decide(0, 0, new Map([["m/prefill", sig(1, 8000, 1)]]), fleet, tight, initialMemory(0)).pools[0]!;
    expect(d.terms.ttft_feasible).toBe(0);
    expect(d.explain).toMatch(/target below the idle TTFT 235 ms: sized at 0\.8 of saturation/);
    expect(Number.isFinite(d.desired)).toBe(true);
    const held = decide(0, 0, new Map([["m/prefill", sig(0, 1, 1, { heldRequests: 1, heldTokens: 100 })]]), fleet, cfg(p), initialMemory(0)).pools[0]!;
    expect(held.desired).toBe(1);
    expect(held.explain).toMatch(/held 1 requests/);
  });
});

describe("planner.slo config", () => {
  const env = { hostname: "h", dataDir: "/tmp/herd-slo-config" };
  const yaml = (...lines: string[]) => lines.join("\n") + "\n";
  const head = (kind: string) => ["models:", "  - name: m", "engines:", `  - kind: ${kind}`, "    model: m", "planner:", "  pools:", "    - engine: 0", "  slo:"];

  test("defaults, and null = off", () => {
    expect(parseConfigText(yaml(), "herd.yaml", env).config!.planner.slo).toBeNull();
    const c = parseConfigText(yaml(...head("sim"), "    ttft_ms: 400"), "herd.yaml", env);
    expect(c.findings).toEqual([]);
    expect(c.config!.planner.slo).toEqual({ ttft_ms: 400, itl_ms: 50, profile: "", horizon_ms: 60_000, correction_ewma: 0.2, correction_max: 3 });
  });

  test("findings name the key path and its line", () => {
    const vllm = parseConfigText(yaml(...head("vllm"), "    ttft_ms: 400"), "herd.yaml", env);
    // A kind without its own step cost (the driver's capability, src/engine/check.ts) needs a profile.
    const w = checkEngines(vllm.config!, { ids: [], source: "given" }, vllm.lineOf).find((f) => f.path === "planner.slo.profile");
    const sim = parseConfigText(yaml(...head("sim"), "    ttft_ms: 400"), "herd.yaml", env);
    expect(checkEngines(sim.config!, { ids: [], source: "given" }, sim.lineOf).filter((f) => f.path.startsWith("planner.slo"))).toEqual([]);
    expect(w).toMatchObject({ severity: "warning", line: 9 });
    expect(w!.message).toMatch(/built-in step cost.*herd simulate --calibrate/);
    const zero = parseConfigText(yaml(...head("sim"), "    itl_ms: 0"), "herd.yaml", env);
    expect(zero.config ?? null).toBeNull();
    expect(zero.findings.find((f) => f.path === "planner.slo.itl_ms")).toMatchObject({ severity: "error", line: 10 });
    const inverted = parseConfigText(yaml(...head("sim"), "    ttft_ms: 10", "    itl_ms: 20"), "herd.yaml", env);
    expect(inverted.findings.find((f) => f.path === "planner.slo.ttft_ms")).toMatchObject({ severity: "warning", line: 10 });
    const nopools = parseConfigText(yaml("planner:", "  slo:", "    ttft_ms: 400"), "herd.yaml", env);
    expect(nopools.findings.find((f) => f.path === "planner.slo")).toMatchObject({ severity: "warning", line: 2 });
  });

  test("a profile that is not there is a file finding; a sim entry sizes from its own flags", () => {
    const text = yaml(...head("sim"), "    profile: /nonexistent/sla.json");
    const c = parseConfigText(text, "herd.yaml", env).config!;
    const f = checkConfigFiles(c, null, () => true, { kind: () => "missing", executable: () => true, pathEnv: "" });
    expect(f.find((x) => x.path === "planner.slo.profile")?.message).toMatch(/does not exist.*--calibrate/);
    const e = engineFigures({ ...c.engines[0]!, args: ["--token-ms", "0.05", "--time-scale", "2", "--max-num-batched-tokens", "4096"] }, null);
    expect(e.cost.linearMsPerToken).toBeCloseTo(0.025, 9);
    expect(e.maxNumBatchedTokens).toBe(4096);
    expect(engineFigures({ ...c.engines[0]!, kind: "vllm" }, { pairMs: 2e-6 }).cost).toEqual({ ...DEFAULT_FIGURES.cost, pairMs: 2e-6 });
  });

  test("a --calibrate --save profile sets the pools' step cost; one without figures is refused by name", () => {
    const dir = mkdtempSync(join(tmpdir(), "herd-slo-"));
    const file = join(dir, "profile.json");
    writeFileSync(file, JSON.stringify({ herd_simulate_calibration: 1, source: "bench.json", cost: { ...DEFAULT_FIGURES.cost, linearMsPerToken: 0.04, weightsMs: 9 } }));
    const c = parseConfigText(yaml(...head("vllm"), `    profile: ${file}`), "herd.yaml", env).config!;
    const pc = plannerConfigFrom(c, () => 1);
    expect(pc.slo).toEqual({ ttftMs: 1000, itlMs: 50, horizonMs: 60_000, correctionEwma: 0.2, correctionMax: 3 });
    expect(pc.pools[0]!.engine!.cost).toEqual({ ...DEFAULT_FIGURES.cost, linearMsPerToken: 0.04, weightsMs: 9 });
    writeFileSync(file, JSON.stringify({ cost: {} }));
    expect(() => plannerConfigFrom(c, () => 1)).toThrow(/planner\.slo\.profile: .* has no "cost" figures/);
    // Without planner.slo the pools carry no engine figures (the capacity figures apply).
    const off = plannerConfigFrom(parseConfigText(yaml(...head("sim").slice(0, -1)), "herd.yaml", env).config!, () => 1);
    expect(off.slo).toBeNull();
    expect(off.pools[0]!.engine).toBeUndefined();
  });
});
