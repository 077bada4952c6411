// vLLM's Prometheus metrics for the simulated engine (docs/references.md#engines-3), on a private prom-client Registry
// (herd's own metrics live in the same process in tests). Labels: model_name (served name) and engine
// ("0": one engine core behind the API server). Counters carry the `_total` suffix that Python's
// prometheus_client adds on export. Histogram buckets follow vLLM's.

import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { FinishInfo, SchedulerStats } from "./scheduler.ts";

const TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0];
const ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
const LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0];
const TOKEN_BUCKETS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000];

const LABELS = ["model_name", "engine"] as const;

/** What the sim knows of its CacheConfig. */
export interface CacheInfo {
  blockSize: number;
  numBlocks: number;
  /** vLLM's --gpu-memory-utilization (the sim's KV size stands for 0.9 on an H100-80GB). */
  gpuMemoryUtilization?: number;
}

/**
 * vllm:cache_config_info's labels: CacheConfig's fields as strings (CacheConfig.metrics_info) plus
 * `engine`; the set seen on a live vLLM /metrics (block_size, cache_dtype, calculate_kv_scales,
 * cpu_offload_gb, enable_prefix_caching, gpu_memory_utilization, is_attention_free, num_cpu_blocks,
 * num_gpu_blocks, num_gpu_blocks_override, sliding_window, swap_space_bytes). Python str() of
 * booleans and None.
 */
export function cacheConfigLabels(c: CacheInfo): Record<string, string> {
  return {
    block_size: String(c.blockSize),
    cache_dtype: "auto",
    calculate_kv_scales: "False",
    cpu_offload_gb: "0",
    enable_prefix_caching: "True",
    engine: "0",
    gpu_memory_utilization: String(c.gpuMemoryUtilization ?? 0.9),
    is_attention_free: "False",
    num_cpu_blocks: "None",
    num_gpu_blocks: String(c.numBlocks),
    num_gpu_blocks_override: "None",
    sliding_window: "None",
    swap_space_bytes: String(4 * 2 ** 30),
  };
}

export class SimMetrics {
  readonly registry = new Registry();
  private readonly labels: { model_name: string; engine: string };
  // Labelled children, bound once: observing through them skips label hashing on every token.
  private readonly ttft: Histogram.Internal<string>;
  private readonly itl: Histogram.Internal<string>;
  private readonly e2e: Histogram.Internal<string>;
  private readonly queueTime: Histogram.Internal<string>;
  private readonly promptHist: Histogram.Internal<string>;
  private readonly genHist: Histogram.Internal<string>;
  private readonly tpot: Histogram.Internal<string>;
  private readonly inferenceTime: Histogram.Internal<string>;
  private readonly prefillTime: Histogram.Internal<string>;
  private readonly decodeTime: Histogram.Internal<string>;
  private readonly success: Counter<string>;
  private last = { prefixQueries: 0, prefixHits: 0, promptTokens: 0, generationTokens: 0, preemptions: 0 };

  constructor(model: string, stats: () => SchedulerStats, cacheInfo: CacheInfo) {
    this.labels = { model_name: model, engine: "0" };
    const r = [this.registry];
    const labels = this.labels;
    const gauge = (name: string, help: string, read: (s: SchedulerStats) => number) =>
      new Gauge({ name, help, labelNames: LABELS, registers: r, collect() { this.set(labels, read(stats())); } });
    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", (s) => s.running);
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", (s) => s.waiting);
    gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", (s) => s.kvUsage);

    // Counters advance by the scheduler's cumulative figures at scrape time.
    const last = this.last;
    const counter = (name: string, help: string, key: keyof typeof last) =>
      new Counter({
        name, help, labelNames: LABELS, registers: r,
        collect() {
          const v = stats()[key];
          if (v > last[key]) this.inc(labels, v - last[key]);
          last[key] = v;
        },
      }).inc(labels, 0);
    counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", "prefixQueries");
    counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", "prefixHits");
    counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", "promptTokens");
    counter("vllm:generation_tokens_total", "Number of generation tokens processed.", "generationTokens");
    counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", "preemptions");

    this.success = new Counter({ name: "vllm:request_success_total", help: "Count of successfully processed requests.", labelNames: [...LABELS, "finished_reason"], registers: r });
    for (const reason of ["stop", "length", "abort"]) this.success.inc({ ...labels, finished_reason: reason }, 0);
    const hist = (name: string, help: string, buckets: number[]) => new Histogram({ name, help, labelNames: LABELS, buckets, registers: r }).labels(labels);
    this.ttft = hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS);
    this.itl = hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", ITL_BUCKETS);
    this.e2e = hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", LATENCY_BUCKETS);
    this.queueTime = hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS);
    this.promptHist = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", TOKEN_BUCKETS);
    this.genHist = hist("vllm:request_generation_tokens", "Number of generation tokens processed.", TOKEN_BUCKETS);
    this.tpot = hist("vllm:request_time_per_output_token_seconds", "Histogram of time_per_output_token_seconds per request.", ITL_BUCKETS);
    this.inferenceTime = hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", LATENCY_BUCKETS);
    this.prefillTime = hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", LATENCY_BUCKETS);
    this.decodeTime = hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS);
    // vLLM sets every sleep_state child at start-up: awake 1, the two sleep levels 0.
    const sleep = new Gauge({
      name: "vllm:engine_sleep_state",
      help: "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
      labelNames: [...LABELS, "sleep_state"],
      registers: r,
    });
    for (const [state, v] of [["awake", 1], ["weights_offloaded", 0], ["discard_all", 0]] as const) sleep.set({ ...labels, sleep_state: state }, v);
    const info = cacheConfigLabels(cacheInfo);
    new Gauge({ name: "vllm:cache_config_info", help: "Information of the LLMEngine CacheConfig", labelNames: Object.keys(info), registers: r }).set(info, 1);
  }

  /** Record one token's timing; `prevMs` is the previous token's time (undefined for the first). */
  token(nowMs: number, prevMs: number | undefined, arrivalMs: number): void {
    if (prevMs === undefined) this.ttft.observe((nowMs - arrivalMs) / 1000);
    else this.itl.observe((nowMs - prevMs) / 1000);
  }

  finished(f: FinishInfo): void {
    this.success.inc({ ...this.labels, finished_reason: f.reason });
    if (f.reason === "abort") return;
    this.e2e.observe((f.finishMs - f.arrivalMs) / 1000);
    if (f.scheduledMs !== undefined) this.queueTime.observe((f.scheduledMs - f.arrivalMs) / 1000);
    this.promptHist.observe(f.promptTokens);
    this.genHist.observe(f.outputTokens);
    // vLLM v1 (metrics/stats.py update_from_finished_request): prefill = scheduled → first token,
    // decode = first → last token, inference = scheduled → last token, TPOT = decode / (n − 1).
    if (f.scheduledMs !== undefined && f.firstTokenMs !== undefined) {
      const decodeS = (f.finishMs - f.firstTokenMs) / 1000;
      this.prefillTime.observe((f.firstTokenMs - f.scheduledMs) / 1000);
      this.decodeTime.observe(decodeS);
      this.inferenceTime.observe((f.finishMs - f.scheduledMs) / 1000);
      this.tpot.observe(f.outputTokens > 1 ? decodeS / (f.outputTokens - 1) : 0);
    }
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}
