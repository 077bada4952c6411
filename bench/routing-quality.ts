// Routing quality benchmark (issue 4): four workloads × six routing variants on 4 simulated H100
// engines in virtual time (`herd simulate`'s engine: the real Router, the sim engine's scheduler and
// timing model, KV events fed in process). Per workload and seed, one table: TTFT p50/p95, ITL p95,
// throughput, engine prefix-hit rate and TTFT p95 relative to round-robin, every row from the same
// requests at the same offered times. Then a check of issue 4's targets per seed.
//
// Run:  ./node_modules/.bin/bun bench/routing-quality.ts [--seeds 1,2,3] [--workloads a,b,c,d]
//         [--requests-scale 1] [--json FILE] [--sweep]
// --sweep prints round-robin's TTFT p95 over a range of rates per workload (how the rates were chosen).
import { writeFileSync } from "node:fs";
import { KV_BLOCKS, REPLICAS, runOne, type Row, SCENARIOS, type Scenario, variants } from "./routing-quality/lib.ts";
import { checkTargets, renderTable } from "./routing-quality/report.ts";

function flag(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : undefined;
}

const seeds = (flag("seeds") ?? "1,2,3").split(",").map(Number);
const keys = (flag("workloads") ?? "a,b,c,c2,d").split(",");
const scale = Number(flag("requests-scale") ?? 1);
const jsonFile = flag("json");
const scenarios = SCENARIOS.filter((s) => keys.includes(s.key) || keys.includes(s.name));
const wall0 = performance.now();

console.log(`routing quality: ${REPLICAS} simulated engines (Qwen3-8B on H100 timings, sim defaults), ${KV_BLOCKS} KV blocks × 16 tokens each; seeds ${seeds.join(",")}`);

if (process.argv.includes("--sweep")) {
  const rr = variants().find((v) => v.name === "round-robin")!;
  for (const s of scenarios) {
    const line: string[] = [];
    for (const f of [0.25, 0.5, 0.75, 0.875, 1, 1.125, 1.25]) {
      const rate = Math.round(s.rate * f * 10) / 10;
      const r = await runOne(s, rr, seeds[0]!, { rate, requests: Math.round(s.requests * scale) });
      line.push(`${rate}/s: ${(r.summary.ttft!.p95 * 1000).toFixed(0)} ms`);
    }
    console.log(`(${s.key}) ${s.name} round-robin TTFT p95 by rate: ${line.join(", ")}`);
  }
  process.exit(0);
}

const rows: Row[] = [];
for (const s of scenarios) {
  console.log(`\n(${s.key}) ${s.name}: ${s.about}\n    ${describe(s)}`);
  for (const seed of seeds) {
    const part: Row[] = [];
    for (const v of variants()) part.push(await runOne(s, v, seed, { requests: Math.round(s.requests * scale) }));
    rows.push(...part);
    const r0 = part[0]!;
    console.log(`\nseed ${seed}: ${r0.summary.requests.measured} measured requests (${s.warmup_s} s warm-up excluded), ${r0.virtual_s.toFixed(0)} s of virtual traffic per variant`);
    console.log(renderTable(part));
  }
}

console.log("\nTargets (issue 4): herd's kv default has the lowest TTFT p95 in (a), (b), (d); within 5% of the best in (c); ≥ 3× better than round-robin in (a)");
const checks = checkTargets(rows, scenarios);
for (const c of checks) console.log(`  ${c.ok ? "ok  " : c.tie ? "TIE " : "MISS"} ${c.text}`);
const wall_s = (performance.now() - wall0) / 1000;
console.log(`\n${rows.length} runs in ${wall_s.toFixed(0)} s wall time`);
if (jsonFile) {
  const strip = rows.map((r) => ({ ...r }));
  writeFileSync(jsonFile, JSON.stringify({ routing_quality: 1, replicas: REPLICAS, kv_blocks: KV_BLOCKS, seeds, scenarios, variants: variants().map((v) => ({ name: v.name, policy: v.policy, router: v.router })), rows: strip, checks, wall_s }, null, 1) + "\n");
  console.log(`wrote ${jsonFile}`);
}
process.exit(checks.every((c) => c.ok) ? 0 : 1);

function describe(s: Scenario): string {
  const w = Object.entries(s.workload).filter(([k]) => k !== "kind").map(([k, v]) => `${k}=${v}`).join(",");
  return `--workload ${s.workload.kind}:${w} --rate ${s.rate} --requests ${Math.round(s.requests * scale)} --warmup ${s.warmup_s}`;
}
