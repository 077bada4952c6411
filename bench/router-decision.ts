// Decision latency of each routing policy through the Router facade (filters + policy + explain
// terms), 16 workers with varied scraped load and live in-flight bookings. Prints p50/p99 per policy.
// Run: ./node_modules/.bin/bun bench/router-decision.ts [decisions-per-policy]
import { RealClock } from "../src/core/clock.ts";
import { SeededRng } from "../src/core/rng.ts";
import { WorkerRegistry } from "../src/workers/registry.ts";
import { emptyLoad } from "../src/workers/worker.ts";
import type { RouterConfig } from "../src/config/types.ts";
import { Router } from "../src/router/router.ts";
import { POLICY_FACTORIES } from "../src/router/policies/index.ts";
import type { Lease } from "../src/router/lease.ts";
import { parsePromText } from "../src/engine/telemetry/prom-text.ts";
import { engineLoad, ENGINE_LOAD_METRICS } from "../src/engine/telemetry/engine-load.ts";
import { defaultConfig } from "../src/config/index.ts";

const KV_DEFAULTS = defaultConfig({ hostname: "bench", dataDir: "/tmp/herd-bench" }).router;

const N = Number(process.argv[2] ?? 50_000);
const WORKERS = 16;

function config(policy: string): RouterConfig {
  return {
    policy: policy as RouterConfig["policy"],
    seed: 7,
    session: { header: "x-session-id", load_factor: 1.25, virtual_nodes: 100 },
    retry: { attempts: 1, budget_ratio: 0.2, min_retries_per_window: 3 },
    outlier: KV_DEFAULTS.outlier,
    metrics_scrape_interval_ms: 1000,
    // kv / prefix knobs at their defaults (these requests carry no block hashes: load terms only).
    kv: KV_DEFAULTS.kv,
    prefix: KV_DEFAULTS.prefix,
    pd: KV_DEFAULTS.pd,
    pipeline: KV_DEFAULTS.pipeline,
    predicted: KV_DEFAULTS.predicted,
  };
}

function percentile(sorted: Float64Array, p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

function bench(policy: string): { p50: number; p99: number; mean: number } {
  const registry = new WorkerRegistry();
  const rng = new SeededRng(1);
  for (let i = 0; i < WORKERS; i++) {
    registry.upsert({
      id: `node-${i % 4}/sim-${i}`, node: `node-${i % 4}`, model: "m", role: "aggregated", kind: "sim",
      url: `http://127.0.0.1:${8100 + i}`, state: "ready", restarts: 0, load: emptyLoad(),
    });
    registry.updateLoad(`node-${i % 4}/sim-${i}`, { running: rng.int(20), waiting: rng.int(5), kv_usage: rng.float() });
  }
  const router = new Router({ config: config(policy), registry, clock: new RealClock(), rng: new SeededRng(2) });
  const leases: Lease[] = [];
  const samples = new Float64Array(N);
  const warmup = Math.min(5000, N);
  for (let i = -warmup; i < N; i++) {
    const req = { model: "m", sessionId: i % 4 === 0 ? null : `session-${i % 500}`, promptTokens: 512, exclude: new Set<string>() };
    const t0 = Bun.nanoseconds();
    const { worker } = router.route(req);
    const t1 = Bun.nanoseconds();
    if (i >= 0) samples[i] = (t1 - t0) / 1000;
    // Keep ~64 requests in flight so load-aware policies see changing load.
    leases.push(router.book(worker.id, 512));
    if (leases.length > 64) leases.splice(rng.int(leases.length), 1)[0]!.release();
  }
  for (const l of leases) l.release();
  samples.sort();
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  return { p50: percentile(samples, 0.5), p99: percentile(samples, 0.99), mean };
}

console.log(`router decision latency, ${WORKERS} workers, ${N} decisions per policy (µs, route() incl. filters and explain terms)`);
console.log("policy          p50_us   p99_us   mean_us");
for (const f of Object.values(POLICY_FACTORIES)) {
  const r = bench(f.name);
  console.log(`${f.name.padEnd(14)} ${r.p50.toFixed(2).padStart(7)} ${r.p99.toFixed(2).padStart(8)} ${r.mean.toFixed(2).padStart(9)}`);
}

// Scrape parsing cost for one engine's /metrics (the per-worker work of each scrape round).
const body = Array.from({ length: 200 }, (_, i) => `vllm:time_to_first_token_seconds_bucket{engine="0",le="${i}",model_name="m"} ${i}.0`).join("\n") +
  '\nvllm:num_requests_running{engine="0",model_name="m"} 3.0\nvllm:num_requests_waiting{engine="0",model_name="m"} 1.0\nvllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.5\n';
const reps = 2000;
const t0 = Bun.nanoseconds();
for (let i = 0; i < reps; i++) engineLoad(parsePromText(body, { names: ENGINE_LOAD_METRICS }).samples);
console.log(`scrape parse: ${(body.length / 1024).toFixed(1)} KiB exposition → load in ${((Bun.nanoseconds() - t0) / reps / 1000).toFixed(1)} µs`);
