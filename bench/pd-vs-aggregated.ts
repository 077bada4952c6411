// Aggregated vs P/D on sim engines, same GPU count (2): two aggregated engines behind least-loaded
// choice, against one prefill + one decode engine driven by the P/D orchestrator (src/pd). Long-input
// (8k in, 256 out) and short (256 in, 256 out) workloads, closed loop at a fixed concurrency, fresh
// prompts (no prefix reuse). Prints TTFT p50/p99, inter-token gap p99 (the decode stall a long
// prefill causes in an aggregated batch) and requests/s, P/D as ratios of aggregated.
// The KV transfer is paced as Qwen3-8B's real size over a link: 2.25 MiB per 16-token block at
// LINK_GBPS (default 25 GB/s, 200 Gb/s RDMA), scaled by the sims' time scale; the bytes on the wire
// are fewer (1 KiB per block) so loopback TCP is not the bottleneck.
// Run: ./node_modules/.bin/bun bench/pd-vs-aggregated.ts [requests=24] [concurrency=6] [time_scale=10] [link_GBps=25]
import { RealClock } from "../src/core/clock.ts";
import { SeededRng } from "../src/core/rng.ts";
import { parseKvTransferConfig } from "../src/engine/sim/kv-transfer-config.ts";
import { QWEN3_8B_KV_BYTES_PER_BLOCK } from "../src/engine/sim/options.ts";
import { type SimEngine, startSimEngine } from "../src/engine/sim/server.ts";
import { type LegOutcome, runPd } from "../src/pd/orchestrator.ts";
import type { LegRunner, PinnedLeg } from "../src/request/plan.ts";
import { defaultConfig } from "../src/config/index.ts";
import { Router, type RouteRequest } from "../src/router/index.ts";
import { WorkerRegistry } from "../src/workers/registry.ts";
import { emptyLoad, type Worker } from "../src/workers/worker.ts";
import { readStreamTiming, type StreamTiming } from "./lib/stream-timing.ts";

const N = Number(process.argv[2] ?? 24);
const CONC = Number(process.argv[3] ?? 6);
const SCALE = Number(process.argv[4] ?? 10);
const LINK = Number(process.argv[5] ?? 25) * 1e9;
const WIRE_BYTES_PER_BLOCK = 1024;

type Timing = StreamTiming;

/**
 * One request's legs: routed by the router (the router.pd presets), streamed; for the client leg
 * records TTFT (end to end from `t0`: a P/D request's prefill leg counts) and the longest gap.
 */
class TimingRunner implements LegRunner {
  constructor(
    private readonly router: Router,
    private readonly timings: Timing[],
    private readonly requestId: string,
    private readonly t0 = performance.now(),
  ) {}
  route(req: RouteRequest, dryRun?: boolean) {
    return dryRun ? this.router.explain(req) : this.router.route(req);
  }
  async run(leg: PinnedLeg, signal: AbortSignal): Promise<LegOutcome> {
    const res = await fetch(`${leg.worker.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", "x-request-id": this.requestId }, body: leg.body, signal });
    if (res.status !== 200) return { kind: "failed", reason: "status_5xx", message: `HTTP ${res.status}: ${await res.text()}`, status: res.status };
    if (!leg.toClient) return { kind: "done", text: await res.text() };
    this.timings.push(await readStreamTiming(res, this.t0, SCALE));
    return { kind: "committed", answer: null };
  }
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;

async function closedLoop(n: number, conc: number, one: (i: number) => Promise<void>): Promise<number> {
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: conc }, async () => {
    while (next < n) await one(next++);
  }));
  return (performance.now() - t0) / 1000 * SCALE;
}

const kv = () => parseKvTransferConfig(JSON.stringify({ kv_connector: "NixlConnector", kv_role: "kv_both", kv_load_failure_policy: "recompute" }));
const worker = (id: string, role: Worker["role"], e: SimEngine): Worker => ({ id, node: "n1", model: "sim", url: e.url, kind: "sim", role, state: "ready", restarts: 0, load: emptyLoad() });
const ROUTER = defaultConfig({ hostname: "bench", dataDir: "/tmp/herd-bench" }).router;
function routerOver(ws: Worker[], seed: number): Router {
  const registry = new WorkerRegistry();
  for (const w of ws) registry.upsert(w);
  return new Router({ config: ROUTER, registry, clock: new RealClock(), seed });
}
const leg = (w: Worker, body: string): PinnedLeg => ({ name: "local", route: { model: "sim", sessionId: null, promptTokens: 0 }, worker: w, endpoint: "completions", body, stream: true, toClient: true, commitTimeoutMs: null });

async function workload(name: string, inTokens: number, outTokens: number, seed: number) {
  const body = (i: number) => ({ model: "sim", prompt: Array.from({ length: inTokens }, (_, k) => 100 + ((k * 31 + i * 977 + seed) % 60_000)), max_tokens: outTokens, ignore_eos: true, stream: true });
  // Aggregated: two engines, each request to the one with fewer in flight.
  const agg = [await startSimEngine({ port: 0, timeScale: SCALE }), await startSimEngine({ port: 0, timeScale: SCALE })];
  const inflight = [0, 0];
  const aggTimings: Timing[] = [];
  const aggRouter = routerOver([], seed);
  const aggS = await closedLoop(N, CONC, async (i) => {
    const w = inflight[0]! <= inflight[1]! ? 0 : 1;
    inflight[w]!++;
    await new TimingRunner(aggRouter, aggTimings, `a${i}`).run(leg(worker(`a${w}`, "aggregated", agg[w]!), JSON.stringify(body(i))), new AbortController().signal);
    inflight[w]!--;
  });
  for (const e of agg) await e.stop();
  // P/D: one prefill, one decode; the transfer paced as the real KV size over the link.
  const rate = (WIRE_BYTES_PER_BLOCK / QWEN3_8B_KV_BYTES_PER_BLOCK) * LINK * SCALE;
  const common = { port: 0, timeScale: SCALE, kvTransfer: kv(), sideChannelHost: "127.0.0.1", sideChannelPort: 0, kvBytesPerBlock: WIRE_BYTES_PER_BLOCK, kvTransferBytesPerS: rate } as const;
  const p = await startSimEngine(common);
  const d = await startSimEngine(common);
  const pdRouter = routerOver([worker("p", "prefill", p), worker("d", "decode", d)], seed);
  const pdTimings: Timing[] = [];
  const deps = { pd: { min_prefill_tokens: 0, prefill_queue_max: 1_000 }, prefillQueue: () => [0], rng: new SeededRng(seed), clock: new RealClock() };
  const pdS = await closedLoop(N, CONC, async (i) => {
    const runner = new TimingRunner(pdRouter, pdTimings, `p${i}`);
    await runPd({ ...deps, runner }, { requestId: `p${i}`, endpoint: "completions", body: body(i), stream: true, route: { model: "sim", sessionId: null, promptTokens: inTokens, blockSize: 16 }, maxTokens: outTokens, flow: "vllm" }, new AbortController().signal);
  });
  await p.stop();
  await d.stop();
  const row = (label: string, t: Timing[], s: number) => ({
    label, ttftP50: pct(t.map((x) => x.ttftMs), 0.5), ttftP99: pct(t.map((x) => x.ttftMs), 0.99), gapP99: pct(t.map((x) => x.maxGapMs), 0.99), rps: t.length / s,
  });
  const a = row("aggregated", aggTimings, aggS);
  const b = row("P/D", pdTimings, pdS);
  console.log(`${name} (${inTokens} in, ${outTokens} out, ${N} requests, concurrency ${CONC}, model time)`);
  for (const r of [a, b]) {
    console.log(`  ${r.label.padEnd(10)} TTFT p50 ${r.ttftP50.toFixed(0)} ms p99 ${r.ttftP99.toFixed(0)} ms | worst inter-token gap p99 ${r.gapP99.toFixed(1)} ms | ${r.rps.toFixed(2)} req/s`);
  }
  console.log(`  P/D ÷ aggregated: TTFT p50 ×${(b.ttftP50 / a.ttftP50).toFixed(2)}, gap p99 ×${(b.gapP99 / a.gapP99).toFixed(2)}, req/s ×${(b.rps / a.rps).toFixed(2)}`);
}

await workload("long input", 8192, 256, 1);
await workload("short input", 256, 256, 2);
