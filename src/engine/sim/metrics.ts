// vLLM's Prometheus metrics for the simulated engine (engines.md §3), on a private prom-client Registry
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
  private readonly success: Counter<string>;
  private last = { prefixQueries: 0, prefixHits: 0, promptTokens: 0, generationTokens: 0, preemptions: 0 };

  constructor(model: string, stats: () => SchedulerStats, cacheInfo: { blockSize: number; numBlocks: number }) {
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
    new Gauge({
      name: "vllm:cache_config_info",
      help: "Information of the LLMEngine CacheConfig",
      labelNames: ["engine", "block_size", "num_gpu_blocks", "enable_prefix_caching"],
      registers: r,
    }).set({ engine: "0", block_size: String(cacheInfo.blockSize), num_gpu_blocks: String(cacheInfo.numBlocks), enable_prefix_caching: "True" }, 1);
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
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}
