// Two tenants on one saturated fleet, in virtual time (no sockets, no wall clock: the same figures on
// every run). herd's real Frontend (admission, tenant limits, fair queue, lifecycle) over SimUpstream
// on SimSchedulers with the sim engine's H100 cost model. Tenant "steady" sends its share; tenant
// "flood" sends 10× as much, more than the fleet can serve. Printed: steady's TTFT p50/p95 alone,
// then beside the flood with herd's queue off (engines queue FCFS), with the fair queue (VTC, equal
// priority), and with steady in a higher priority class; then the two levers of docs/benchmarks.md:
// slots held back for tenants under their fair share (`headroom_slots`), the engine taking the rank
// too (vLLM's --scheduling-policy priority in the sim scheduler, herd's per-leg `priority`), and both;
// flood's served/refused counts.
// Usage: bun bench/tenant-fairness.ts [seconds=20] [workers=2] [steady_rps=2] [worker_slots=16] [headroom_slots=4]
import { execSync } from "node:child_process";
import { VirtualClock } from "../src/core/clock.ts";
import { memoryLogger } from "../test/helpers/log.ts";
import { defaultConfig } from "../src/config/index.ts";
import type { QueueConfig } from "../src/config/types.ts";
import { DEFAULT_COST } from "../src/engine/sim/cost.ts";
import { SimScheduler } from "../src/engine/sim/scheduler.ts";
import { Frontend } from "../src/frontend/app.ts";
import { HerdMetrics } from "../src/metrics/herd-metrics.ts";
import { SSE_FRAMES, SimUpstream } from "../src/simulate/sim-upstream.ts";
import { Router } from "../src/router/index.ts";
import { WorkerRegistry } from "../src/workers/registry.ts";
import { emptyLoad } from "../src/workers/worker.ts";

const seconds = Number(process.argv[2] ?? 20);
const workers = Number(process.argv[3] ?? 2);
const steadyRps = Number(process.argv[4] ?? 2);
const workerSlots = Number(process.argv[5] ?? 16);
const headroomSlots = Number(process.argv[6] ?? 4);
const FLOOD_FACTOR = 10;
const PROMPT_TOKENS = 1024;
/** Mean output length; each request asks for 32..224 tokens (seeded), so completions do not come in lockstep. */
const OUTPUT_TOKENS = 128;
const outputOf = (n: number) => 32 + ((n * 2654435761) >>> 0) % 193;
const MODEL = "m1";

interface Run {
  label: string;
  flood: boolean;
  queue: QueueConfig;
  steadyPriority: number;
  /** Engines run --scheduling-policy priority and herd sends each leg its rank. */
  enginePriority?: boolean;
}

interface Result {
  steadyTtftMs: number[];
  floodServed: number;
  floodRefused: number;
  steadyRefused: number;
  /** Mean time steady's requests waited in herd's queue. */
  steadyQueueMeanMs?: number;
}

/** Deterministic distinct prompts: request n's tokens never repeat another's (no prefix cache help). */
function promptOf(n: number): Uint32Array {
  const out = new Uint32Array(PROMPT_TOKENS);
  let x = (n * 2654435761) >>> 0 || 1;
  for (let i = 0; i < out.length; i++) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    out[i] = 1000 + (x % 100_000);
  }
  return out;
}

/** Arrivals at a fixed rate with a seeded jitter (the same schedule every run). */
function arrivals(rps: number, durationMs: number, seed: number): number[] {
  const out: number[] = [];
  let x = seed >>> 0 || 1;
  const gap = 1000 / rps;
  for (let t = 0; t < durationMs; ) {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    t += gap * (0.5 + (x % 1000) / 1000); // uniform in [0.5, 1.5) × the mean gap
    if (t < durationMs) out.push(t);
  }
  return out;
}

/** Chunks read and requests answered: the readers' progress, so time only moves once they are idle. */
let progress = 0;
const flush = async () => {
  // Settle every reader before the clock moves: a reader that lagged behind virtual time would keep
  // its request (and its queue slot) open after the engine finished it.
  for (let before = -1; before !== progress; ) {
    before = progress;
    for (let i = 0; i < 3; i++) await new Promise<void>((r) => setImmediate(r));
  }
};

async function run(r: Run): Promise<Result> {
  const clock = new VirtualClock(0);
  const config = defaultConfig({ hostname: "bench", dataDir: "/tmp/herd-bench" });
  config.models = [{ name: MODEL, path: MODEL, tokenizer: "", block_size: 16, max_model_len: 0, prefix_caching_hash_algo: "", aliases: [], lora_adapters: [] }];
  config.engines = [];
  config.router.policy = "least-loaded";
  config.router.seed = 7;
  config.frontend.queue = r.queue;
  config.frontend.first_token_timeout_ms = 600_000;
  config.frontend.api_keys = [
    { key: "k-steady", key_file: "", name: "steady", rpm: 0, tpm: 0, concurrency: 0, priority: r.steadyPriority },
    { key: "k-flood", key_file: "", name: "flood", rpm: 0, tpm: 0, concurrency: 0, priority: 0 },
  ];
  const registry = new WorkerRegistry();
  const schedulers = new Map<string, SimScheduler>();
  for (let i = 0; i < workers; i++) {
    const id = `sim-${i}`;
    registry.upsert({ id, node: "bench", model: MODEL, role: "aggregated", kind: "sim", url: `sim://${id}`, state: "ready", load: emptyLoad(), restarts: 0 });
    schedulers.set(id, new SimScheduler({ blockSize: 16, numBlocks: 24_700, maxNumSeqs: 1024, maxNumBatchedTokens: 8192, maxWaiting: 100_000, maxModelLen: 40_960, cost: DEFAULT_COST, timeScale: 1, hashSeed: BigInt(i + 1), policy: r.enginePriority ? "priority" : "fcfs" }, clock));
  }
  const log = memoryLogger();
  const router = new Router({ config: config.router, registry, clock, log });
  const metrics = new HerdMetrics([MODEL], () => registry.list());
  const prompts = new Map<string, Uint32Array>();
  const upstream = new SimUpstream({ frames: SSE_FRAMES, scheduler: (id) => schedulers.get(id)!, promptOf: (leg) => prompts.get(leg.requestId)! });
  const frontend = new Frontend({ config, registry, router, metrics, clock, log, upstream, ...(r.enginePriority ? { enginePriority: () => true } : {}) });
  const res: Result = { steadyTtftMs: [], floodServed: 0, floodRefused: 0, steadyRefused: 0 };
  const durationMs = seconds * 1000;
  let n = 0;
  let open = 0;
  const send = (tenant: "steady" | "flood") => {
    const id = `r${n}`;
    const maxTokens = outputOf(n);
    prompts.set(id, promptOf(n++));
    const start = clock.now();
    open++;
    void (async () => {
      const resp = await frontend.app.fetch(
        new Request("http://herd/v1/chat/completions", {
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer k-${tenant}`, "x-request-id": id },
          body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: id }], max_tokens: maxTokens, stream: true }),
        }),
        { ip: "127.0.0.1" },
      );
      if (resp.status !== 200 || !resp.body) {
        if (tenant === "flood") res.floodRefused++;
        else res.steadyRefused++;
        await resp.text();
      } else {
        const reader = resp.body.getReader();
        let first = true;
        for (;;) {
          const c = await reader.read();
          progress++;
          if (c.done) break;
          if (first && tenant === "steady") res.steadyTtftMs.push(clock.now() - start);
          first = false;
        }
        if (tenant === "flood") res.floodServed++;
      }
      prompts.delete(id);
      progress++;
      open--;
    })();
  };
  if (process.env.DEBUG === "2")
    for (let t = 0; t < durationMs; t += 1000)
      clock.setTimer(t, () => console.log(`  t=${clock.now()} vtc=${frontend.queue.counter("steady")}/${frontend.queue.counter("flood")} queue=${frontend.queue.size} in_flight=${frontend.inFlightCount} engine=${JSON.stringify([...schedulers.values()].map((x) => [x.stats().running, x.stats().waiting]))}`));
  for (const t of arrivals(steadyRps, durationMs, 11)) clock.setTimer(t, () => send("steady"));
  if (r.flood) for (const t of arrivals(steadyRps * FLOOD_FACTOR, durationMs, 23)) clock.setTimer(t, () => send("flood"));
  for (;;) {
    await flush();
    if (!clock.step()) {
      await flush();
      if (open === 0 || !clock.step()) break;
    }
  }
  frontend.close();
  const text = await metrics.render();
  const sum = Number(/herd_tenant_queue_wait_seconds_sum\{tenant="steady"\} ([\d.e+-]+)/.exec(text)?.[1] ?? NaN);
  const count = Number(/herd_tenant_queue_wait_seconds_count\{tenant="steady"\} (\d+)/.exec(text)?.[1] ?? NaN);
  res.steadyQueueMeanMs = (sum / count) * 1000;
  return res;
}

const pct = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
};

const off: QueueConfig = { worker_slots: 0, max_waiting: 4096, timeout_ms: 30_000, aging_ms: 0, headroom_slots: 0 };
const fair: QueueConfig = { worker_slots: workerSlots, max_waiting: 4096, timeout_ms: 30_000, aging_ms: 10_000, headroom_slots: 0 };
const headroom: QueueConfig = { ...fair, headroom_slots: headroomSlots };
const runs: Run[] = [
  { label: "steady alone", flood: false, queue: off, steadyPriority: 0 },
  { label: "+ flood, herd queue off (engine FCFS)", flood: true, queue: off, steadyPriority: 0 },
  { label: "+ flood, fair queue (VTC, equal priority)", flood: true, queue: fair, steadyPriority: 0 },
  { label: "+ flood, fair queue, steady priority 1", flood: true, queue: fair, steadyPriority: 1 },
  { label: `+ flood, fair queue + headroom ${headroomSlots}/worker`, flood: true, queue: headroom, steadyPriority: 0 },
  { label: "+ flood, fair queue + engine priority", flood: true, queue: fair, steadyPriority: 0, enginePriority: true },
  { label: `+ flood, fair queue + headroom ${headroomSlots} + engine priority`, flood: true, queue: headroom, steadyPriority: 0, enginePriority: true },
  { label: "+ flood, herd queue off, steady priority 1 + engine priority", flood: true, queue: off, steadyPriority: 1, enginePriority: true },
];

console.log(`tenant fairness: ${workers} sim workers (H100 cost model), ${seconds}s virtual, prompt ${PROMPT_TOKENS} / output 32..224 (mean ${OUTPUT_TOKENS}) tokens,`);
console.log(`steady ${steadyRps} req/s, flood ${steadyRps * FLOOD_FACTOR} req/s; fair queue worker_slots ${fair.worker_slots}, timeout ${fair.timeout_ms} ms; headroom_slots ${headroomSlots}`);
console.log("| run | steady TTFT p50 ms | steady TTFT p95 ms | p95 vs alone | flood served | flood refused |");
console.log("|---|---:|---:|---:|---:|---:|");
let alone = NaN;
// RUNS=0,4 runs only those rows (the first is the baseline the ratios divide by): for sweeps.
const only = process.env.RUNS ? new Set(process.env.RUNS.split(",").map(Number)) : null;
for (const [i, r] of runs.entries()) {
  if (only && !only.has(i)) continue;
  const x = await run(r);
  const p95 = pct(x.steadyTtftMs, 95);
  if (Number.isNaN(alone)) alone = p95;
  console.log(`| ${r.label} | ${pct(x.steadyTtftMs, 50).toFixed(0)} | ${p95.toFixed(0)} | ${(p95 / alone).toFixed(2)}× | ${r.flood ? x.floodServed : "–"} | ${r.flood ? x.floodRefused : "–"} |`);
  if (x.steadyRefused > 0) console.log(`  (steady refused: ${x.steadyRefused})`);
  if (process.env.DEBUG) console.log(`  steady queue wait mean ${x.steadyQueueMeanMs?.toFixed(1)} ms`);
}
console.log(`commit ${execSync("git rev-parse --short HEAD", { encoding: "utf8" }).trim()}`);
