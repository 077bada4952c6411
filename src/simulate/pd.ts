// Aggregated vs P/D in virtual time (`herd simulate --pd`): the same seeded arrivals (a rate shape's
// times and prompt/output lengths) through 2N aggregated sim engines, or N prefill + N decode. Every
// request runs herd's real code: the frontend's lifecycle (ticket, admission, commit point), the
// router (router.policy for aggregated; the `pd-prefill` / `pd-decode` presets for the legs), and for
// P/D the real plan builder and orchestrator (src/pd `pdPlanBuilder` → `runPd`: the decider on a dry
// run of the decode leg, prefill → kv_transfer_params → decode, the failure rules). Engines are the
// sim engine's own scheduler (src/engine/sim/scheduler.ts: continuous batching, chunked prefill,
// prefix cache, priced by its step cost), the one timing model of `herd simulate`; the KV transfer
// between a prefill and a decode engine is timed at the link bandwidth (pd-upstream.ts). Seeded:
// one seed gives one result.
import { runSettled } from "../core/clock.ts";
import { SeededRng } from "../core/rng.ts";
import type { Config } from "../config/types.ts";
import { DEFAULT_OPTIONS } from "../engine/sim/options.ts";
import { blockHashes } from "../kv/hash.ts";
import { pdPlanBuilder } from "../pd/plan.ts";
import { runRequest, type LifecycleDeps } from "../request/lifecycle.ts";
import { aggregatedPlan, type PlanBuilder } from "../request/plan.ts";
import { Admission, type Ticket } from "../request/ticket.ts";
import type { ChunkSource, ReadResult } from "../request/upstream.ts";
import { shapedArrivals, type RateShape } from "../workload/rate-shapes.ts";
import { SimCluster } from "./cluster.ts";
import { type PdChunk, VirtualPd } from "./pd-upstream.ts";
import { outcomeRecorder, QUIET } from "./quiet.ts";

/** Qwen3-8B's KV: 144 KiB per token (36 layers × 8 KV heads × 128 × 2 (K, V) × 2 bytes). */
export const QWEN3_8B_KV_BYTES_PER_TOKEN = 144 * 1024;

export interface PdSimSpec {
  shape: RateShape;
  durationS: number;
  seed: number;
  /** Engines per pool in P/D; aggregated runs twice as many. */
  engines: number;
  blockSize: number;
  kvBytesPerToken: number;
  /** Link bandwidth between a prefill and a decode engine, bytes per second. */
  linkBytesPerS: number;
  /** Fixed cost of a transfer (handshake, notification), ms. */
  transferMs: number;
  minPrefillTokens: number;
  /** herd's config (router, frontend, pd); default: the embedded default's. */
  base: Config;
}

export interface PdSimResult {
  requests: number;
  /** Requests that ended without their whole answer (the lifecycle's error outcome). */
  failed: number;
  ttft_p50_ms: number;
  ttft_p95_ms: number;
  /** Mean inter-token latency per request: p50 / p95 over requests. */
  itl_p50_ms: number;
  itl_p95_ms: number;
  throughput_rps: number;
  /** Requests that went through the prefill pool (P/D only: the decider said disaggregate). */
  disaggregated: number;
  /** KV transfers completed, and decode legs that found no held blocks (prefilled locally). */
  transfers: number;
  load_failures: number;
}

/** One request in flight: when it arrived, its first and last token. */
interface InFlight {
  atMs: number;
  firstMs: number | null;
  lastMs: number;
  tokens: number;
}

export async function simulatePd(spec: PdSimSpec, mode: "aggregated" | "pd"): Promise<PdSimResult> {
  const n = spec.engines;
  const config: Config = { ...spec.base, pd: { ...spec.base.pd, min_prefill_tokens: spec.minPrefillTokens } };
  const engine = { ...DEFAULT_OPTIONS, blockSize: spec.blockSize, seed: spec.seed };
  const c = new SimCluster({
    model: "sim", replicas: 2 * n, policy: config.router.policy, router: config.router, frontend: config.frontend, engine, kvEventDelayMs: 0, seed: spec.seed,
    roles: mode === "pd" ? [...Array<"prefill">(n).fill("prefill"), ...Array<"decode">(n).fill("decode")] : undefined,
  });
  const clock = c.clock;
  const upstream = new VirtualPd({
    clock, blockSize: spec.blockSize, kvBytesPerToken: spec.kvBytesPerToken, linkBytesPerS: spec.linkBytesPerS, transferMs: spec.transferMs,
    scheduler: (id) => c.replica(id).scheduler,
  });
  const ttft: number[] = [];
  const itl: number[] = [];
  let done = 0;
  let failed = 0;
  let lastMs = 0;
  let disaggregated = 0;
  const inFlight = new Map<Ticket, InFlight>();
  const recorder = outcomeRecorder((t, o) => {
    const q = inFlight.get(t)!;
    inFlight.delete(t);
    if (o.kind !== "complete" || o.status !== 200 || q.firstMs === null) return void failed++;
    done++;
    ttft.push(q.firstMs - q.atMs);
    if (q.tokens > 1) itl.push((q.lastMs - q.firstMs) / (q.tokens - 1));
    lastMs = Math.max(lastMs, q.lastMs);
  });
  const admission = new Admission(clock, recorder, config.frontend.max_in_flight);
  const deps: LifecycleDeps<PdChunk> = {
    router: c.router, upstream, clock, log: QUIET,
    firstTokenTimeoutMs: config.frontend.first_token_timeout_ms, idleTimeoutMs: config.frontend.idle_timeout_ms,
  };
  const plans: PlanBuilder = mode === "pd"
    ? pdPlanBuilder({
      config: () => config, registry: c.registry, router: () => c.router, clock, rng: new SeededRng(spec.seed * 31 + 7), log: QUIET,
      onTrace: (_id, trace) => void (trace.decision.disaggregate && disaggregated++),
    })
    : aggregatedPlan;
  // Arrivals from the seed alone (as before the comparison ran on the sim scheduler), prompts apart.
  const rng = new SeededRng(spec.seed);
  const promptRng = new SeededRng(spec.seed * 7919 + 1);
  let index = 0;
  const send = (isl: number, osl: number) => {
    // A unique prompt per request (no shared prefix: the comparison is about prefill placement).
    const prompt = new Uint32Array(isl);
    for (let i = 0; i < isl; i++) prompt[i] = 1000 + promptRng.int(100_000);
    const q: InFlight = { atMs: clock.now(), firstMs: null, lastMs: 0, tokens: 0 };
    const t = admission.ticket();
    inFlight.set(t, q);
    if (!t.admit()) return t.release({ kind: "refused", status: 429, reason: "overloaded" });
    const route = { model: "sim", sessionId: `s${index}`, promptTokens: isl, blockHashes: blockHashes(prompt, spec.blockSize), blockSize: spec.blockSize };
    const json = { model: "sim", max_tokens: osl, stream: true };
    const plan = plans({ endpoint: "completions", body: JSON.stringify(json), stream: true, route, promptTokens: prompt, maxTokens: osl, json });
    runRequest(deps, t, plan, `r${index++}`, (a) => {
      if (a.kind === "stream") read(a.body, q);
    });
  };
  const read = (body: ChunkSource<PdChunk>, q: InFlight) => {
    const next = (r: ReadResult<PdChunk>): void => {
      if (r.done || "error" in r || typeof r.value !== "number" || r.value < 0) return;
      const now = clock.now();
      q.firstMs ??= now;
      q.lastMs = now;
      q.tokens++;
      body.read(next);
    };
    body.read(next);
  };
  const it = shapedArrivals(spec.shape, spec.durationS, rng);
  const arrive = () => {
    const a = it.next();
    if (a.done) return;
    clock.setTimer(a.value.atS * 1000 - clock.now(), () => {
      send(a.value.isl, a.value.osl);
      arrive();
    });
  };
  arrive();
  const scrapeMs = config.router.metrics_scrape_interval_ms;
  const scrape = () => {
    c.scrape();
    if (inFlight.size > 0 || clock.now() < spec.durationS * 1000) clock.setTimer(scrapeMs, scrape);
  };
  if (scrapeMs > 0) clock.setTimer(scrapeMs, scrape);
  await runSettled(clock);
  const pct = (xs: number[], p: number) => (xs.length === 0 ? 0 : [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!);
  const r1 = (x: number) => Math.round(x * 10) / 10;
  return {
    requests: done, failed,
    ttft_p50_ms: r1(pct(ttft, 0.5)), ttft_p95_ms: r1(pct(ttft, 0.95)), itl_p50_ms: r1(pct(itl, 0.5)), itl_p95_ms: r1(pct(itl, 0.95)),
    throughput_rps: lastMs > 0 ? Math.round((done / (lastMs / 1000)) * 100) / 100 : 0,
    disaggregated, transfers: upstream.counters.transfers, load_failures: upstream.counters.loadFailures,
  };
}
