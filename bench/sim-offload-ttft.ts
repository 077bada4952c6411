// A real sim engine (default Qwen3-8B/H100 timings, real clock) with and without herd's tier (a
// TierService + RESP server in this process): TTFT of a 4000-token prompt that a second prompt
// evicted from a 300-block GPU cache, recomputed vs loaded back. Median of `--reps` rounds.
// Run: ./node_modules/.bin/bun bench/sim-offload-ttft.ts [--reps 5] [--bytes-per-block 65536]
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RealClock } from "../src/core/clock.ts";
import { parseConfigText } from "../src/config/index.ts";
import { startSimEngine } from "../src/engine/sim/server.ts";
import { TierService } from "../src/tier/service.ts";

const arg = (n: string, d: string) => (process.argv.includes(`--${n}`) ? process.argv[process.argv.indexOf(`--${n}`) + 1]! : d);
const reps = Number(arg("reps", "5"));
const bytes = Number(arg("bytes-per-block", "65536"));
const seq = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
const shm = mkdtempSync("/dev/shm/herd-bench-");
const disk = mkdtempSync(join(tmpdir(), "herd-bench-"));
const cfg = parseConfigText(`node: { data_dir: ${disk} }\nkv_tier:\n  cpu: { size: 1GiB, path: ${shm}/t }\n  resp: { listen: 127.0.0.1:0 }\n`, "herd.yaml", { hostname: "h", dataDir: disk }).config!;
const svc = new TierService({ config: cfg, clock: new RealClock(), bootId: "bench" });
await svc.start();

async function ttftMs(url: string, prompt: number[]): Promise<{ ms: number; cached: number }> {
  const t0 = performance.now();
  const r = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m", prompt, max_tokens: 1 }) });
  const j = (await r.json()) as { usage: { prompt_tokens_details: { cached_tokens: number } } };
  return { ms: performance.now() - t0, cached: j.usage.prompt_tokens_details.cached_tokens };
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

const results: Record<string, { ms: number[]; cached: number }> = {};
for (const tier of [false, true]) {
  const ms: number[] = [];
  let cached = 0;
  for (let i = 0; i < reps; i++) {
    const e = await startSimEngine({ port: 0, model: "m", kvBlocks: 300, ...(tier ? { kvOffloadUrl: `resp://127.0.0.1:${svc.resp!.port}`, kvOffloadBytesPerBlock: bytes } : {}) });
    const A = seq(1000 + i * 10_000, 4000);
    await ttftMs(e.url, A);
    await ttftMs(e.url, seq(50_000 + i * 10_000, 4000)); // evicts A
    for (let k = 0; k < 200 && tier && e.offload!.inFlightSettled() === false; k++) await Bun.sleep(5);
    const r = await ttftMs(e.url, A);
    ms.push(r.ms);
    cached = r.cached;
    await e.stop();
  }
  results[tier ? "tier" : "no tier"] = { ms, cached };
}
const a = median(results["no tier"]!.ms);
const b = median(results.tier!.ms);
console.log(`4000-token prompt evicted by another (300 GPU blocks), sim default timings, ${bytes} B/block through RESP, load 25 GB/s modelled; median of ${reps}`);
console.log(`  no tier: TTFT ${a.toFixed(1)} ms, cached ${results["no tier"]!.cached} tokens`);
console.log(`  tier:    TTFT ${b.toFixed(1)} ms, cached ${results.tier!.cached} tokens  → ${(b / a).toFixed(2)}× of recomputing`);
await svc.stop();
rmSync(shm, { recursive: true, force: true });
rmSync(disk, { recursive: true, force: true });
