// TensorRT-LLM (`trtllm-serve MODEL …`, NVIDIA/TensorRT-LLM tensorrt_llm/commands/serve.py).
// Its /metrics is not Prometheus text: it is a JSON array of the iteration stats recorded since the
// last call (docs/source/commands/trtllm-serve.rst "Metrics Endpoint"), each with
// numActiveRequests, numQueuedRequests and kvCacheStats {usedNumBlocks, maxNumBlocks, …}.
import type { EngineDriver, EngineLoad, MetricsReading } from "../driver.ts";
import { httpOk, makeSpec, noCapacity, sameLaunch } from "./common.ts";

const num = (v: unknown): number | null => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? v : null);

/**
 * The newest stat per attention-DP rank, summed (counts) and averaged (KV usage). An empty array
 * means no iteration ran since the last scrape: nothing was scheduled, so the engine is idle.
 */
export function readTrtllmStats(body: string): MetricsReading {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { load: null };
  }
  if (!Array.isArray(parsed)) return { load: null };
  if (parsed.length === 0) return { load: { running: 0, waiting: 0, kv_usage: null } };
  const latest = new Map<number, Record<string, unknown>>();
  for (const s of parsed) {
    if (typeof s !== "object" || s === null) continue;
    const st = s as Record<string, unknown>;
    latest.set(num(st.attentionDpRank) ?? 0, st);
  }
  let running: number | null = null;
  let waiting: number | null = null;
  let kvSum = 0;
  let kvN = 0;
  let blocks = 0;
  const add = (a: number | null, v: number | null) => (v === null ? a : (a ?? 0) + v);
  for (const st of latest.values()) {
    running = add(running, num(st.numActiveRequests));
    waiting = add(waiting, num(st.numQueuedRequests));
    const kv = (st.kvCacheStats ?? {}) as Record<string, unknown>;
    const used = num(kv.usedNumBlocks);
    const max = num(kv.maxNumBlocks);
    if (used !== null && max) {
      kvSum += Math.min(1, used / max);
      kvN++;
      blocks += max;
    }
  }
  const load: EngineLoad = { running, waiting, kv_usage: kvN ? kvSum / kvN : null };
  if (load.running === null && load.waiting === null && load.kv_usage === null) return { load: null };
  return blocks > 0 ? { load, kvBlocks: blocks } : { load };
}

export const trtllm: EngineDriver = {
  id: "engine.driver.trtllm",
  kind: "trtllm",
  managed: true,
  usesGpus: true,
  // KV events live in trtllm's YAML (`--config`) and their payload's vLLM compatibility is
  // unverified; until tested against a real peer, trtllm workers are routed without them.
  wantsKvPorts: false,
  pdFlow: null,
  tier: null,
  lora: false,
  loadsModelPath: true,
  builtinTokenizer: false,
  ownKeys: [],
  launch(input) {
    const { model, entry } = input;
    const argv = ["trtllm-serve", model.path, "--host", entry.host, "--port", String(input.port)];
    if (model.max_model_len > 0) argv.push("--max_seq_len", String(model.max_model_len));
    if (input.gpus.length > 1) argv.push("--tp_size", String(input.gpus.length));
    // trtllm-serve has no --served-model-name: it answers to the model path.
    return makeSpec(input, argv, model.path);
  },
  health: httpOk,
  metrics: { path: "/metrics", format: "json", names: new Set(), read: readTrtllmStats },
  kvCapacity: noCapacity,
  check(entry, { model }) {
    const out = [];
    if (entry.gpu_memory_utilization > 0)
      out.push({ severity: "warning" as const, key: "gpu_memory_utilization", message: "a vLLM flag; trtllm sizes its KV cache with --kv_cache_free_gpu_memory_fraction (a share of the memory left after weights): put that in args" });
    if (model?.prefix_caching_hash_algo)
      out.push({ severity: "warning" as const, key: "kind", message: `models[].prefix_caching_hash_algo ${model.prefix_caching_hash_algo} is a vLLM flag; trtllm engines ignore it` });
    return out;
  },
  recover: sameLaunch,
};
