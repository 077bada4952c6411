// --calibrate: least squares recovers known timing figures from a synthetic bench JSON, and roughly
// recovers them from a simulated run of the same model (records shaped exactly as herd bench writes).
import { expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defaultConfig } from "../../src/config/index.ts";
import { type CostParams, DEFAULT_COST } from "../../src/engine/sim/cost.ts";
import { DEFAULT_OPTIONS } from "../../src/engine/sim/options.ts";
import { parseSyntheticWorkload } from "../../src/workload/plan.ts";
import { type RecordRow, toBenchResult, toRunResult } from "../../src/workload/report.ts";
import { summarize } from "../../src/workload/stats.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { calibrate } from "../../src/simulate/calibrate.ts";
import { simulateMain } from "../../src/simulate/cli.ts";
import { PromptEncoder } from "../../src/simulate/prompts.ts";
import { simulateRun } from "../../src/simulate/run.ts";

const TRUE: CostParams = { stepMs: 1.5, weightsMs: 9, linearMsPerToken: 0.03, pairMs: 2e-6, kvReadMsPerToken: 8e-5, requestMs: 20 };

function syntheticRows(c: CostParams, n: number): RecordRow[] {
  const rng = new SeededRng(5);
  const rows: RecordRow[] = [];
  for (let i = 0; i < n; i++) {
    const prompt = 800 + rng.int(7000);
    const cached = rng.float() < 0.5 ? 16 * rng.int(Math.floor((prompt - 600) / 16)) : 0;
    const u = prompt - cached;
    const out = 16 + rng.int(200);
    const ttftMs = c.requestMs + c.stepMs + c.linearMsPerToken * u + c.pairMs * (u * cached + (u * u) / 2);
    const itlMs = c.stepMs + c.weightsMs + c.kvReadMsPerToken * (prompt + out / 2);
    const start = (i % 40) * 20; // one at a time within a run (no overlap, decode batch 1); runs of 40 all start at 0
    rows.push({
      at_s: start, start_s: start, session: `s${i}`, ttft_s: ttftMs / 1000, e2e_s: (ttftMs + itlMs * (out - 1)) / 1000, itl_mean_s: itlMs / 1000,
      prompt_tokens: prompt, completion_tokens: out, cached_tokens: cached, error: null,
    });
  }
  return rows;
}

test("recovers known figures from a synthetic bench JSON (through --calibrate and --save)", async () => {
  const rows = syntheticRows(TRUE, 80);
  // Two runs (a sweep) whose times overlap: overlaps must only be looked for within a run.
  const runs = [rows.slice(0, 40), rows.slice(40)].map((part, k) => {
    const run = toRunResult(summarize(part.map((r, index) => ({ ...r, index, itl_s: [r.itl_mean_s!] })), { warmup_s: 0, slo: {} }), { rate: null, concurrency: k + 1 }, [], 1);
    run.records = part;
    return run;
  });
  const dir = mkdtempSync(join(tmpdir(), "herd-cal-"));
  try {
    await Bun.write(join(dir, "b.json"), JSON.stringify(toBenchResult({ synthetic: true }, runs)));
    const out: string[] = [];
    expect(await simulateMain(["--calibrate", join(dir, "b.json"), "--save", join(dir, "fit.json")], { out: (t) => void out.push(t), err: () => {} })).toBe(0);
    const fit = (await Bun.file(join(dir, "fit.json")).json()) as { cost: CostParams; flags: string; r2: { ttft: number; itl: number } };
    for (const k of Object.keys(TRUE) as (keyof CostParams)[]) expect(Math.abs(fit.cost[k] - TRUE[k]) / TRUE[k]).toBeLessThan(0.01);
    expect(fit.r2.ttft).toBeGreaterThan(0.999);
    expect(out.join("\n")).toContain(fit.flags);
    expect(fit.flags).toContain("--token-ms 0.03 ");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}, 20_000);

test("from a simulated concurrency-1 multi-turn run (growing contexts) of a known model, token/pair/kv figures come back within 2 %", async () => {
  const base = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-cal-test" });
  const run = simulateRun(
    { model: "m", replicas: 1, policy: "round-robin", router: base.router, frontend: base.frontend, engine: { ...DEFAULT_OPTIONS, cost: TRUE }, kvEventDelayMs: 0, seed: 3 },
    { workload: parseSyntheticWorkload("multi-turn:sessions=3,turns=10,system_tokens=300,user_tokens=600,output=48"), arrivals: { kind: "closed" }, limit: { requests: 60, duration_s: null }, concurrency: 1, duration_s: null, ordered: true, ignoreEos: true },
    await PromptEncoder.load(null, 16),
  );
  const rows = toRunResult(summarize(run.records, { warmup_s: 0, slo: {} }), { rate: null, concurrency: 1 }, run.records, 1).records;
  const fit = calibrate([rows]);
  expect(fit.rows.ttft).toBeGreaterThan(50);
  const rel = (k: keyof CostParams) => Math.abs(fit.cost[k] - TRUE[k]) / TRUE[k];
  expect(rel("linearMsPerToken")).toBeLessThan(0.02);
  expect(rel("kvReadMsPerToken")).toBeLessThan(0.02);
  expect(rel("pairMs")).toBeLessThan(0.02);
  console.log(`fit from the simulated run: ${fit.flags} (R² TTFT ${fit.r2.ttft?.toFixed(4)}, ITL ${fit.r2.itl?.toFixed(4)})`);
  expect(Math.abs(fit.cost.requestMs + fit.cost.stepMs - (TRUE.requestMs + TRUE.stepMs))).toBeLessThan(2);
  expect(Math.abs(fit.cost.weightsMs + fit.cost.stepMs - (TRUE.weightsMs + TRUE.stepMs))).toBeLessThan(0.5);
  // The defaults are far from TRUE: the fit really moved.
  expect(Math.abs(DEFAULT_COST.requestMs - TRUE.requestMs)).toBeGreaterThan(5);
}, 20_000);
