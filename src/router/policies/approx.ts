// approx: llm-d's approximate prefix index as the cache source (../pipeline/llm-d.ts approxSource:
// the router's own routing history, an exact per-worker LRU of the first 256 block hashes of each
// routed prompt, capacity router.prefix.max_blocks_per_worker, no TTL), then the stages
// `router.pipeline` lists. With router.pipeline = queue 2, kv-utilization 2, prefix-share 3,
// no-hit-lru 2, picker min it is llm-d's "Optimized Baseline" scheduling profile
// (OPTIMIZED_BASELINE_PIPELINE below; docs/benchmarks.md, bench/routing-quality/lib.ts llmdOptimizedBaseline); with herd's default
// pipeline it is `prefix` over llm-d's index instead of herd's sampled, TTL-bounded one.
import type { RouterConfig } from "../../config/types.ts";
import { approxSource } from "../pipeline/llm-d.ts";
import { preset } from "./preset.ts";

/** The Optimized Baseline's stages for `router.pipeline` (no filters; max-score is herd's `min` over −scores). */
export const OPTIMIZED_BASELINE_PIPELINE: Pick<RouterConfig["pipeline"], "filters" | "scorers" | "picker"> = {
  filters: [],
  scorers: [
    { type: "queue", weight: 2 },
    { type: "kv-utilization", weight: 2 },
    { type: "prefix-share", weight: 3 },
    { type: "no-hit-lru", weight: 2 },
  ],
  picker: "min",
};

export const approx = preset({
  name: "approx",
  spec: (cfg) => cfg.pipeline,
  source: (cfg) => approxSource(cfg.prefix.max_blocks_per_worker),
});
