// Which engine metrics mean "load", per engine family, and how they fold into WorkerLoad.
// vLLM (engines.md §3): vllm:num_requests_running / _waiting, vllm:kv_cache_usage_perc (0..1; the
// pre-0.10 name vllm:gpu_cache_usage_perc is read when the new one is absent).
// SGLang (engines.md §6.3): sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage (0..1).
// One API server can front several data-parallel engines (label `engine` in vLLM, `dp_rank` in
// SGLang): request counts are summed across them (and across SGLang's `priority` queues), KV usage is
// averaged (the capacity left overall). Newer SGLang builds label series with model-parallel ranks
// (`tp_rank`, `pp_rank`, `moe_ep_rank`); ranks of one DP replica report the same requests, so only
// rank 0 of those labels is read, lest a TP-2 engine count every request twice.
import type { Sample } from "./prom-text.ts";

const RUNNING = ["vllm:num_requests_running", "sglang:num_running_reqs"];
const WAITING = ["vllm:num_requests_waiting", "sglang:num_queue_reqs"];
/** In order of preference: the first name present wins. */
const KV_USAGE = ["vllm:kv_cache_usage_perc", "sglang:token_usage", "vllm:gpu_cache_usage_perc"];

/** Model-parallel rank labels: only the "0" series (or series without them) are read. */
const SHARD_RANK_LABELS = ["tp_rank", "pp_rank", "moe_ep_rank", "attn_tp_rank"];

export const ENGINE_LOAD_METRICS: ReadonlySet<string> = new Set([...RUNNING, ...WAITING, ...KV_USAGE]);

export interface EngineLoad {
  running: number | null;
  waiting: number | null;
  kv_usage: number | null;
}

/** Fold samples into load figures; null when none of the known metrics is present. */
export function engineLoad(samples: readonly Sample[]): EngineLoad | null {
  const byName = new Map<string, number[]>();
  for (const s of samples) {
    if (!ENGINE_LOAD_METRICS.has(s.name) || !Number.isFinite(s.value) || s.value < 0) continue;
    if (SHARD_RANK_LABELS.some((l) => s.labels[l] !== undefined && s.labels[l] !== "0")) continue;
    let vs = byName.get(s.name);
    if (!vs) byName.set(s.name, (vs = []));
    vs.push(s.value);
  }
  const sumOf = (names: string[]) => {
    for (const n of names) {
      const vs = byName.get(n);
      if (vs) return vs.reduce((a, b) => a + b, 0);
    }
    return null;
  };
  let kv: number | null = null;
  for (const n of KV_USAGE) {
    const vs = byName.get(n);
    if (vs) {
      kv = Math.min(1, vs.reduce((a, b) => a + b, 0) / vs.length);
      break;
    }
  }
  const load = { running: sumOf(RUNNING), waiting: sumOf(WAITING), kv_usage: kv };
  return load.running === null && load.waiting === null && load.kv_usage === null ? null : load;
}
