// approx: llm-d's approximate prefix index as the cache source (../pipeline/llm-d.ts approxSource:
// the router's own routing history, an exact per-worker LRU of the first 256 block hashes of each
// routed prompt, capacity router.prefix.max_blocks_per_worker, no TTL), then the stages
// `router.pipeline` lists. With router.pipeline = queue 2, kv-utilization 2, prefix-share 3,
// no-hit-lru 2, picker min it is llm-d's "Optimized Baseline" scheduling profile
// (docs/benchmarks.md, bench/routing-quality/lib.ts llmdOptimizedBaseline); with herd's default
// pipeline it is `prefix` over llm-d's index instead of herd's sampled, TTL-bounded one.
import { approxSource } from "../pipeline/llm-d.ts";
import { preset } from "./preset.ts";

export const approx = preset({
  name: "approx",
  spec: (cfg) => cfg.pipeline,
  source: (cfg) => approxSource(cfg.prefix.max_blocks_per_worker),
});
