// The routing quality benchmark's pieces (bench/routing-quality.ts is the command line): the four
// workloads of issue 4, the six routing variants compared, and one run of a (workload, variant, seed)
// through `herd simulate`'s in-process engine — real Router, real SimScheduler timing model, KV
// events fed in process, virtual clock — summarised with bench's own statistics.
//
// Every variant of one (workload, seed) sees the same requests at the same offered times (plan() is
// seeded by the seed alone), so the rows of a table differ only by where requests went.
import { defaultConfig } from "../../src/config/index.ts";
import type { PolicyName, RouterConfig } from "../../src/config/types.ts";
import { parseSimArgs } from "../../src/engine/sim/options.ts";
import type { SimEngineOptions } from "../../src/engine/sim/options.ts";
import { OutputVocabulary } from "../../src/engine/sim/output.ts";
import { summarize, type Summary } from "../../src/workload/stats.ts";
import type { SyntheticSpec } from "../../src/workload/workloads.ts";
import { PromptEncoder } from "../../src/simulate/prompts.ts";
import { simulateRun } from "../../src/simulate/run.ts";
import { OPTIMIZED_BASELINE_PIPELINE } from "../../src/router/policies/approx.ts";

export interface Scenario {
  /** Short key: a, b, c, d. */
  key: string;
  name: string;
  /** What it stands for and what a good router does with it. */
  about: string;
  workload: SyntheticSpec;
  /** Poisson arrival rate, req/s: near round-robin's saturation knee (see `--sweep`). */
  rate: number;
  requests: number;
  /** Requests sent before this are left out of the figures (cold caches, ramp-up). */
  warmup_s: number;
  /** Keep each session's turns in order (multi-turn). */
  ordered: boolean;
}

/** Engines per cluster and KV blocks per engine (× 16 tokens): shared by all four workloads. */
export const REPLICAS = 4;
export const KV_BLOCKS = 4096;
export const BLOCK_SIZE = 16;

export const SCENARIOS: readonly Scenario[] = [
  {
    key: "a", name: "doc-qa", ordered: false, rate: 16, requests: 3000, warmup_s: 20,
    about: "many users ask short questions about a few long documents behind one long system prompt",
    workload: { kind: "doc-qa", documents: 16, doc_tokens: 6000, system_tokens: 2000, question_tokens: 50, users: 200, output: 128 },
  },
  {
    key: "b", name: "multi-turn", ordered: true, rate: 24, requests: 4000, warmup_s: 20,
    about: "chat sessions whose context grows every turn (x-session-id set)",
    workload: { kind: "multi-turn", sessions: 64, turns: 10, system_tokens: 1000, user_tokens: 300, output: 128 },
  },
  {
    key: "c", name: "rag", ordered: false, rate: 35, requests: 5000, warmup_s: 20,
    about: "retrieved chunks first: prompts begin differently, almost nothing shared",
    workload: { kind: "rag", chunks: 1000, chunk_tokens: 512, k: 4, question_tokens: 30, output: 128 },
  },
  {
    key: "c2", name: "rag@40", ordered: false, rate: 40, requests: 5000, warmup_s: 20,
    about: "the same RAG workload just past round-robin's knee",
    workload: { kind: "rag", chunks: 1000, chunk_tokens: 512, k: 4, question_tokens: 30, output: 128 },
  },
  {
    key: "d", name: "hot-prefix", ordered: false, rate: 42, requests: 6000, warmup_s: 20,
    about: "Zipf-skewed system prompts: the hottest one alone would overload the engine that caches it",
    workload: { kind: "hot-prefix", prefixes: 100, prefix_tokens: 4000, suffix_tokens: 200, zipf: 1.5, users: 200, output: 128 },
  },
];

export interface Variant {
  name: string;
  policy: PolicyName;
  /** The router section this variant runs with. */
  router: RouterConfig;
  about: string;
}

/** herd's built-in router defaults (config schema), the baseline every variant starts from. */
export function herdRouterDefaults(): RouterConfig {
  return structuredClone(defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-routing-quality" }).router);
}

/**
 * Dynamo's KV router with its shipped defaults (docs/references.md#routers-1.1, #routers-1.7, #routers-1.9; KvRouterConfig):
 * overlap_score_credit 1.0, prefill_load_scale 1.0, host/disk credit 0.75/0.25, router_temperature 0,
 * router_predicted_ttl_secs unset (no predict-on-route side index), router_prefill_load_model none
 * (a prompt counts in full until its first token), router_assume_kv_reuse (a prefix shared by
 * in-flight requests counts once: decode_load_model distinct), no session affinity, no busy
 * thresholds (no overload filter): one cost scorer, argmin.
 */
export function dynamoDefaults(base: RouterConfig): RouterConfig {
  const r = structuredClone(base);
  r.kv = { prefill_load_scale: 1, overlap_credit: { gpu: 1, cpu: 0.75, disk: 0.25 }, temperature: 0, predicted_ttl_ms: 0, prefill_load_model: "none", decode_load_model: "distinct" };
  r.pipeline = { ...r.pipeline, filters: [], scorers: [{ type: "kv-cost", weight: 1 }], picker: "min" };
  return r;
}

/**
 * llm-d's "Optimized Baseline" (llm-d/llm-d guides/optimized-baseline/scheduler/optimized-baseline.values.yaml
 * @29b59cb; the scorers and weights of llm-d-inference-scheduler @520af478 pkg/epp/config/loader/defaults.go
 * plus no-hit-lru): queue-scorer 2, kv-cache-utilization-scorer 2, prefix-cache-scorer 3,
 * no-hit-lru-scorer 2, max-score picker, over the approximate prefix index (the `approx` policy:
 * routing history, 256 blocks per prompt, an LRU per engine sized to its KV blocks: autoTune from
 * the engine's metrics) and metrics refreshed every 50 ms (--refresh-metrics-interval default,
 * pkg/epp/server/options.go). No filters (the profile has none). src/router/pipeline/llm-d.ts.
 */
export function llmdOptimizedBaseline(base: RouterConfig, kvBlocks: number): RouterConfig {
  const r = structuredClone(base);
  r.policy = "approx";
  r.metrics_scrape_interval_ms = 50;
  r.prefix = { ...r.prefix, max_blocks_per_worker: kvBlocks };
  r.pipeline = {
    ...r.pipeline,
    ...structuredClone(OPTIMIZED_BASELINE_PIPELINE),
  };
  return r;
}

/**
 * production-stack's `--routing-logic prefixaware` with its defaults (prefix-min-match-length 0):
 * the trie of its own routed prompts, longest match, random among ties (src/router/policies/prefixaware.ts).
 * Its trie is unbounded upstream (production-stack #687); here it holds at most
 * router.prefix.max_blocks_per_worker nodes (65,536 by default), least recently routed first out.
 */
export function productionStackPrefixAware(base: RouterConfig): RouterConfig {
  return { ...structuredClone(base), policy: "prefixaware" };
}

export function variants(base: RouterConfig = herdRouterDefaults(), kvBlocks = KV_BLOCKS): Variant[] {
  const as = (policy: PolicyName): RouterConfig => ({ ...structuredClone(base), policy });
  return [
    { name: "round-robin", policy: "round-robin", router: as("round-robin"), about: "each worker in turn" },
    { name: "least-loaded", policy: "least-loaded", router: as("least-loaded"), about: "fewest requests in flight" },
    { name: "session", policy: "session", router: as("session"), about: "consistent hash of x-session-id, bounded load" },
    { name: "prefix", policy: "prefix", router: as("prefix"), about: "herd defaults, routing history instead of KV events" },
    { name: "kv (herd)", policy: "kv", router: as("kv"), about: "herd's default kv configuration" },
    { name: "kv (Dynamo)", policy: "kv", router: { ...dynamoDefaults(base), policy: "kv" }, about: "kv with Dynamo's default knobs" },
    { name: "llm-d", policy: "approx", router: llmdOptimizedBaseline(base, kvBlocks), about: "llm-d's Optimized Baseline profile (approximate prefix index, queue/kv/prefix/no-hit-lru scorers, max-score)" },
    { name: "prefixaware", policy: "prefixaware", router: productionStackPrefixAware(base), about: "production-stack's prefixaware (trie of routed prompts, longest match, random ties)" },
  ];
}

export function engineOptions(seed: number, kvBlocks = KV_BLOCKS): SimEngineOptions {
  const e = parseSimArgs(["--kv-blocks", String(kvBlocks), "--block-size", String(BLOCK_SIZE)])!;
  e.seed = seed;
  return e;
}

export interface Row {
  scenario: string;
  variant: string;
  seed: number;
  rate: number;
  summary: Summary;
  /** Engine-reported cached prompt tokens / prompt tokens, measured requests. */
  prefix_hit: number | null;
  preemptions: number;
  /** max / mean of requests routed per replica. */
  request_spread: number;
  virtual_s: number;
  wall_s: number;
}

let shared: { encoder: PromptEncoder; vocab: OutputVocabulary } | null = null;
async function tools(): Promise<{ encoder: PromptEncoder; vocab: OutputVocabulary }> {
  if (!shared) {
    const encoder = await PromptEncoder.load(null, BLOCK_SIZE);
    shared = { encoder, vocab: new OutputVocabulary(encoder.tokenizer) };
  }
  return shared;
}

export interface RunOptions {
  rate?: number;
  requests?: number;
  warmup_s?: number;
  replicas?: number;
  kvBlocks?: number;
  /** The host's CPU KV tier in blocks (herd simulate --kv-tier-blocks); absent = none. */
  kvTierBlocks?: number;
}

/** One (scenario, variant, seed) in virtual time. */
export async function runOne(s: Scenario, v: Variant, seed: number, o: RunOptions = {}): Promise<Row> {
  const { encoder, vocab } = await tools();
  const base = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-routing-quality" });
  const rate = o.rate ?? s.rate;
  const run = simulateRun(
    {
      model: "sim", replicas: o.replicas ?? REPLICAS, policy: v.policy, router: v.router, frontend: base.frontend,
      engine: engineOptions(seed, o.kvBlocks), kvEventDelayMs: 0, seed, kvTierBlocks: o.kvTierBlocks ?? 0,
    },
    {
      workload: s.workload, arrivals: { kind: "poisson", rate }, limit: { requests: o.requests ?? s.requests, duration_s: null },
      concurrency: null, duration_s: null, ordered: s.ordered, ignoreEos: true,
    },
    encoder,
    vocab,
  );
  const summary = summarize(run.records, { warmup_s: o.warmup_s ?? s.warmup_s, slo: {} });
  const routed = run.replicas.map((r) => r.requests);
  const mean = routed.reduce((a, b) => a + b, 0) / routed.length;
  return {
    scenario: s.name, variant: v.name, seed, rate, summary,
    prefix_hit: summary.cached_tokens_ratio,
    preemptions: run.replicas.reduce((n, r) => n + r.preemptions, 0),
    request_spread: mean > 0 ? Math.max(...routed) / mean : 1,
    virtual_s: run.virtual_s, wall_s: run.wall_s,
  };
}
