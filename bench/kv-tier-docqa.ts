// The routing-quality benchmark's doc-QA case with GPU KV too small for the documents, with and
// without the host's CPU KV tier (issue 14): per routing variant, TTFT p95 without the tier, with it,
// and their ratio, from the same requests at the same offered times (herd simulate's engine and
// router in virtual time; the tier as src/tier/virtual-tier.ts models it: evicted prompt blocks kept
// in an LRU CPU tier, loaded back at --kv-offload-load-gb-per-s, credited to the router as cpu).
//
// Run:  ./node_modules/.bin/bun bench/kv-tier-docqa.ts [--seeds 1,2,3] [--gpu-blocks 1024]
//         [--tier-blocks 24000] [--requests 1500] [--rate 3] [--variants "kv (herd),round-robin"]
import { runOne, SCENARIOS, variants } from "./routing-quality/lib.ts";
import { table } from "../src/workload/report.ts";

function flag(name: string, dflt: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : dflt;
}
const seeds = flag("seeds", "1,2,3").split(",").map(Number);
const gpuBlocks = Number(flag("gpu-blocks", "1024"));
const tierBlocks = Number(flag("tier-blocks", "24000"));
const requests = Number(flag("requests", "1500"));
const rate = Number(flag("rate", "3"));
const only = process.argv.includes("--variants") ? flag("variants", "").split(",") : null;
const docqa = SCENARIOS.find((s) => s.key === "a")!;
const ms = (s: number | undefined) => (s === undefined ? "-" : (s * 1000).toFixed(1));
const pct = (x: number | null) => (x === null ? "n/a" : `${(x * 100).toFixed(1)}%`);

console.log(
  `doc-QA (${docqa.workload.kind}: 16 documents × 6000 tokens) at ${rate} req/s on 4 simulated engines with ${gpuBlocks} GPU KV blocks each ` +
    `(${((gpuBlocks * 16) / 1000).toFixed(0)}k tokens); tier: ${tierBlocks} blocks × 2.25 MiB (Qwen3-8B) at 25 GB/s; ${requests} requests per run`,
);
for (const seed of seeds) {
  const rows: string[][] = [["policy", "TTFT p95 no tier (ms)", "with tier", "with / without", "TTFT p50 no tier", "with tier", "prefix hit no tier", "with tier"]];
  for (const v of variants().filter((x) => only === null || only.includes(x.name))) {
    const o = { rate, requests, kvBlocks: gpuBlocks };
    const off = await runOne(docqa, v, seed, o);
    const on = await runOne(docqa, v, seed, { ...o, kvTierBlocks: tierBlocks });
    const a = off.summary.ttft?.p95;
    const b = on.summary.ttft?.p95;
    rows.push([v.name, ms(a), ms(b), a && b ? `${(b / a).toFixed(2)}×` : "-", ms(off.summary.ttft?.p50), ms(on.summary.ttft?.p50), pct(off.prefix_hit), pct(on.prefix_hit)]);
  }
  console.log(`\nseed ${seed}\n${table(rows)}`);
}
