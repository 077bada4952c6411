// The `predicted` policy (issue 25): how well it forecasts, and whether routing on the forecast
// beats kv. herd simulate's in-process engines and real Router in virtual time (as
// bench/routing-quality.ts); every policy of one (load, seed) sees the same requests at the same
// offered times.
//
// Workload `mixed` (src/workload, its defaults): 75 % short chats (a unique 200-token prompt, 256 output tokens) and
// 25 % long document questions (one of 8 documents of 6,000 tokens + a 50-token question, 64 output
// tokens), Poisson arrivals, 4 engines with 4,096 KV blocks each (about 2 documents' worth of cache
// each alongside the chats).
//
// Part 1, forecast error: for every request `predicted` routed (after the warm-up), its forecast
// for the chosen worker against what the simulation measured: MAPE of TTFT (send → first token)
// and of ITL (mean gap of the request), with the online correction on and off.
// Part 2, TTFT p95 of round-robin, kv (herd's defaults) and predicted at three loads: 40 req/s
// (light), 120 (past round-robin's saturation), 160 (past kv's). Target: predicted < kv at each.
//
// Run:  ./node_modules/.bin/bun bench/routing-predicted.ts [--seeds 1,2] [--duration 60] [--rates 40,120,160]
import type { RouterConfig } from "../src/config/types.ts";
import type { Decision } from "../src/router/types.ts";
import { simulateRun } from "../src/simulate/run.ts";
import { summarize } from "../src/workload/stats.ts";
import { table } from "../src/workload/report.ts";
import { DEFAULTS } from "../src/workload/workloads.ts";
import { PromptEncoder } from "../src/simulate/prompts.ts";
import { OutputVocabulary } from "../src/engine/sim/output.ts";
import { defaultConfig } from "../src/config/index.ts";
import { BLOCK_SIZE, engineOptions, herdRouterDefaults, REPLICAS } from "./routing-quality/lib.ts";

function flag(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : dflt;
}
const seeds = flag("seeds", "1,2").split(",").map(Number);
/** Offered seconds per run: requests = rate × this (the first WARMUP_S are left out). */
const duration_s = Number(flag("duration", "60"));
const rates = flag("rates", "40,120,160").split(",").map(Number);
const WARMUP_S = 20;
/** src/workload `mixed` at its defaults (see the header). */
const MIXED = DEFAULTS.mixed;

const encoder = await PromptEncoder.load(null, BLOCK_SIZE);
const vocab = new OutputVocabulary(encoder.tokenizer);
const frontend = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-routing-predicted" }).frontend;

interface Result {
  policy: string;
  rate: number;
  ttftP50: number;
  ttftP95: number;
  itlP95: number;
  mapeTtft: number | null;
  mapeItl: number | null;
  reqPerS: number;
  errors: number;
  wall_s: number;
}

function run(label: string, router: RouterConfig, seed: number, rate: number): Result {
  const requests = Math.round(rate * duration_s);
  const decisions: Decision[] = [];
  const r = simulateRun(
    {
      model: "sim", replicas: REPLICAS, policy: router.policy, router, frontend, engine: engineOptions(seed), kvEventDelayMs: 0, seed,
      routerObserver: { decision: (d) => void decisions.push(d) },
    },
    {
      workload: MIXED, arrivals: { kind: "poisson", rate },
      limit: { requests, duration_s: null }, concurrency: null, duration_s: null, ordered: false, ignoreEos: true,
    },
    encoder,
    vocab,
  );
  const s = summarize(r.records, { warmup_s: WARMUP_S, slo: {} });
  // Decisions are made in send order (one attempt each: the sim never fails a request), so
  // decision i is record i's.
  let mapeTtft: number | null = null;
  let mapeItl: number | null = null;
  if (decisions[0]?.latency && decisions.length === r.records.length) {
    let et = 0, ei = 0, nt = 0, ni = 0;
    for (const rec of r.records) {
      const f = decisions[rec.index]!.latency!;
      if (rec.start_s < WARMUP_S || rec.ttft_s === null) continue;
      et += Math.abs(f.ttftMs - rec.ttft_s * 1000) / (rec.ttft_s * 1000);
      nt++;
      if (rec.itl_s.length > 0) {
        const itl = (rec.itl_s.reduce((a, b) => a + b, 0) / rec.itl_s.length) * 1000;
        ei += Math.abs(f.itlMs - itl) / itl;
        ni++;
      }
    }
    mapeTtft = nt > 0 ? et / nt : null;
    mapeItl = ni > 0 ? ei / ni : null;
  }
  return {
    policy: label, rate, ttftP50: (s.ttft?.p50 ?? NaN) * 1000, ttftP95: (s.ttft?.p95 ?? NaN) * 1000, itlP95: (s.itl?.p95 ?? NaN) * 1000,
    mapeTtft, mapeItl, reqPerS: s.throughput.requests_per_s, errors: s.errors.total, wall_s: r.wall_s,
  };
}

const base = herdRouterDefaults();
const variants: [string, RouterConfig][] = [
  ["round-robin", { ...structuredClone(base), policy: "round-robin" }],
  ["kv (herd)", { ...structuredClone(base), policy: "kv" }],
  ["predicted", { ...structuredClone(base), policy: "predicted" }],
  ["predicted, no correction", { ...structuredClone(base), policy: "predicted", predicted: { ...base.predicted, correction_ewma: 0 } }],
];

const pct = (x: number | null) => (x === null ? "-" : `${(x * 100).toFixed(1)}%`);
let wins = 0;
let cells = 0;
for (const seed of seeds) {
  for (const rate of rates) {
    const rows = variants.map(([label, cfg]) => run(label, cfg, seed, rate));
    const kv = rows.find((x) => x.policy === "kv (herd)")!;
    const p = rows.find((x) => x.policy === "predicted")!;
    cells++;
    if (p.ttftP95 < kv.ttftP95) wins++;
    console.log(`\nmixed (short chats + long documents), seed ${seed}, ${rate} req/s for ${duration_s} s, ${REPLICAS} engines (first ${WARMUP_S} s left out)`);
    console.log(
      table([
        ["policy", "TTFT p50 (ms)", "TTFT p95", "ITL p95", "TTFT p95 vs kv", "forecast MAPE TTFT", "forecast MAPE ITL", "ok req/s", "errors", "wall s"],
        ...rows.map((x) => [
          x.policy, x.ttftP50.toFixed(1), x.ttftP95.toFixed(1), x.itlP95.toFixed(1), `${(x.ttftP95 / kv.ttftP95).toPrecision(3)}×`,
          pct(x.mapeTtft), pct(x.mapeItl), x.reqPerS.toFixed(1), String(x.errors), x.wall_s.toFixed(1),
        ]),
      ]),
    );
  }
}
console.log(`\npredicted beats kv on TTFT p95 in ${wins} of ${cells} (seed, load) cells`);
