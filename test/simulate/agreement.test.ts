// A short simulated run against the same workload run for real: two in-process sim engines (real HTTP,
// real clock) behind a real herd Frontend + Router (round-robin), driven by herd bench's runner. The
// simulation replays the same plan (same seed → same prompts and arrival times) on SimSchedulers in
// virtual time. Prompts carry 2,000 uncached question tokens each and model time runs at half speed,
// so TTFT (~140 ms) is large next to the real run's own overheads, which the model leaves out: two
// HTTP hops, JSON, the engine's tokenizer, timer lateness on a loaded 2-core machine (10–50 ms
// measured). The real run takes about 7 s.
// Stated tolerance: simulated TTFT p50 and p95 between 70 % of the real figure and 5 % (+5 ms) above
// it (the simulation should never be slower than the real thing); prefix-hit rate within 0.01
// absolute (measured: identical). Prompt token counts must match exactly.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { defaultConfig } from "../../src/config/index.ts";
import { startSimEngine, type SimEngine } from "../../src/engine/sim/server.ts";
import { DEFAULT_OPTIONS } from "../../src/engine/sim/options.ts";
import { parseSyntheticWorkload, plan } from "../../src/workload/plan.ts";
import { runOnce } from "../../src/bench/runner.ts";
import { summarize } from "../../src/workload/stats.ts";
import { PromptEncoder } from "../../src/simulate/prompts.ts";
import { simulateRun } from "../../src/simulate/run.ts";
import { MODEL, startHerd, type Herd } from "../frontend/harness.ts";

const WORKLOAD = parseSyntheticWorkload("doc-qa:documents=3,doc_tokens=1500,system_tokens=200,question_tokens=2000,users=20,output=24");
const RATE = 6;
const REQUESTS = 36;
// The first requests prefill each document cold on each engine; figures start after them.
const WARMUP_S = 2;
const KV_BLOCKS = 2000;
// Model time runs at half speed (every duration × 2), so model time dominates the real run's overheads.
const TIME_SCALE = 0.5;
let engines: SimEngine[] = [];
let herd: Herd;

beforeAll(async () => {
  engines = await Promise.all([0, 1].map((i) => startSimEngine({ port: 0, model: MODEL, seed: 1, hashSeed: BigInt(i + 1), kvBlocks: KV_BLOCKS, timeScale: TIME_SCALE })));
  herd = await startHerd({ workers: engines.map((e, i) => ({ id: `sim-${i}`, url: e.url })), policy: "round-robin" });
});
afterAll(async () => {
  await herd?.stop();
  await Promise.all(engines.map((e) => e.stop()));
});

test("simulated TTFT p50/p95 and prefix-hit rate agree with a real run against sim engines", async () => {
  const real = await runOnce({
    target: { url: herd.url, model: MODEL, apiKey: null, ignoreEos: true, timeout_s: 30, sessionHeader: "x-session-id" },
    requests: plan(WORKLOAD, { kind: "poisson", rate: RATE }, { requests: REQUESTS, duration_s: null }, 1),
    concurrency: null, duration_s: null, ordered: false, maxInflight: 1000,
  });
  const r = summarize(real.records, { warmup_s: WARMUP_S, slo: {} });
  expect(r.errors.total).toBe(0);

  const base = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-simulate-test" });
  const sim = simulateRun(
    { model: MODEL, replicas: 2, policy: "round-robin", router: base.router, frontend: base.frontend, engine: { ...DEFAULT_OPTIONS, kvBlocks: KV_BLOCKS, seed: 1, timeScale: TIME_SCALE }, kvEventDelayMs: 0, seed: 1 },
    { workload: WORKLOAD, arrivals: { kind: "poisson", rate: RATE }, limit: { requests: REQUESTS, duration_s: null }, concurrency: null, duration_s: null, ordered: false, ignoreEos: true },
    await PromptEncoder.load(null, 16),
  );
  const s = summarize(sim.records, { warmup_s: WARMUP_S, slo: {} });
  console.log(`real vs simulated: TTFT p50 ${(r.ttft!.p50 * 1000).toFixed(1)} vs ${(s.ttft!.p50 * 1000).toFixed(1)} ms, p95 ${(r.ttft!.p95 * 1000).toFixed(1)} vs ${(s.ttft!.p95 * 1000).toFixed(1)} ms, ITL p50 ${(r.itl!.p50 * 1000).toFixed(2)} vs ${(s.itl!.p50 * 1000).toFixed(2)} ms, hit ${r.cached_tokens_ratio!.toFixed(4)} vs ${s.cached_tokens_ratio!.toFixed(4)}`);
  expect(s.requests.sent).toBe(REQUESTS);
  expect(s.requests.failed).toBe(0);
  // Same prompts through the same rendering and tokenizer: identical prompt token counts.
  expect(sim.records.map((x) => x.prompt_tokens)).toEqual(real.records.map((x) => x.prompt_tokens));
  for (const p of ["p50", "p95"] as const) {
    expect(s.ttft![p]).toBeGreaterThanOrEqual(0.7 * r.ttft![p]);
    expect(s.ttft![p]).toBeLessThanOrEqual(1.05 * r.ttft![p] + 0.005);
  }
  expect(Math.abs(s.cached_tokens_ratio! - r.cached_tokens_ratio!)).toBeLessThanOrEqual(0.01);
}, 60_000);
