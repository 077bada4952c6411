// SGLang (`python3 -m sglang.launch_server …`). Flags: sglang python/sglang/srt/server_args.py;
// metric names: python/sglang/srt/metrics/collector.py.
import type { EngineDriver } from "../driver.ts";
import { foldPromLoad, promLoadNameSet, type PromLoadNames } from "../telemetry/prom-load.ts";
import { parsePromText, type Sample } from "../telemetry/prom-text.ts";
import { httpOk, kvBindJson, makeSpec, noCapacity, sameLaunch } from "./common.ts";

export const SGLANG_LOAD: PromLoadNames = {
  running: ["sglang:num_running_reqs"],
  waiting: ["sglang:num_queue_reqs"],
  kvUsage: ["sglang:token_usage"],
};
// KV capacity (SchedulerMetricsCollector, python/sglang/srt/metrics/collector.py): the pool's pages
// (`num_pages`, newer builds), else its tokens over the page size; SGLang's KV events name one
// block per page, so pages are the blocks herd indexes.
const NUM_PAGES = "sglang:num_pages";
const MAX_TOKENS = "sglang:max_total_num_tokens";
const PAGE_SIZE = "sglang:page_size";
const NAMES: ReadonlySet<string> = new Set([...promLoadNameSet(SGLANG_LOAD), NUM_PAGES, MAX_TOKENS, PAGE_SIZE]);

/**
 * A worker's KV capacity in blocks from SGLang's gauges, or undefined when it does not state it
 * (older builds without a page-size gauge). Each data-parallel rank has its own pool (label
 * `dp_rank`): summed; the tensor/pipeline ranks of one pool report the same figure: the largest
 * is taken.
 */
export function sglangKvBlocks(samples: readonly Sample[]): number | undefined {
  const key = (labels: Record<string, string>) => JSON.stringify(Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
  const pages = new Map<string, { labels: Record<string, string>; pages?: number; tokens?: number; pageSize?: number }>();
  for (const s of samples) {
    if (s.name !== NUM_PAGES && s.name !== MAX_TOKENS && s.name !== PAGE_SIZE) continue;
    if (!Number.isFinite(s.value) || s.value <= 0) continue;
    const k = key(s.labels);
    const e = pages.get(k) ?? { labels: s.labels };
    if (s.name === NUM_PAGES) e.pages = s.value;
    else if (s.name === MAX_TOKENS) e.tokens = s.value;
    else e.pageSize = s.value;
    pages.set(k, e);
  }
  const perRank = new Map<string, number>();
  for (const e of pages.values()) {
    const n = Math.floor(e.pages ?? (e.tokens !== undefined && e.pageSize !== undefined ? e.tokens / e.pageSize : 0));
    if (n < 1) continue;
    const rank = e.labels.dp_rank ?? "";
    perRank.set(rank, Math.max(perRank.get(rank) ?? 0, n));
  }
  let sum = 0;
  for (const n of perRank.values()) sum += n;
  return sum > 0 ? sum : undefined;
}

export const sglang: EngineDriver = {
  id: "engine.driver.sglang",
  kind: "sglang",
  managed: true,
  usesGpus: true,
  wantsKvPorts: true,
  pdFlow: "sglang-bootstrap",
  tier: null,
  lora: true,
  loadsModelPath: true,
  builtinTokenizer: false,
  ownKeys: [],
  launch(input) {
    const { model, entry } = input;
    const argv = ["python3", "-m", "sglang.launch_server", "--model-path", model.path];
    argv.push("--host", entry.host, "--port", String(input.port), "--served-model-name", model.name);
    // The page size default depends on the attention backend; pass it so event hashing is known.
    argv.push("--page-size", String(model.block_size));
    if (model.max_model_len > 0) argv.push("--context-length", String(model.max_model_len));
    if (input.gpus.length > 1) argv.push("--tp-size", String(input.gpus.length));
    // LoRA adapters under their own names (sglang server_args --lora-paths name=path).
    if (model.lora_adapters.length > 0) argv.push("--lora-paths", ...model.lora_adapters.map((a) => `${a.name}=${a.path}`));
    // SGLang rejects unknown keys in newer builds, so no enable_kv_cache_events here.
    const kv = kvBindJson(input, false);
    if (kv) argv.push("--kv-events-config", kv.json);
    // Without it /metrics is empty.
    argv.push("--enable-metrics");
    // By default every GET /health runs a one-token generation (sglang http_server.py health
    // handler); herd probes every health_interval_ms, so ask for the cheap liveness answer. An
    // entry env may still turn it back on.
    return makeSpec(input, argv, model.name, kv?.spec, { SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION: "false" });
  },
  health: httpOk,
  metrics: {
    path: "/metrics",
    format: "prometheus",
    names: NAMES,
    read(body) {
      const samples = parsePromText(body, { names: NAMES }).samples;
      const load = foldPromLoad(samples, SGLANG_LOAD);
      const kvBlocks = sglangKvBlocks(samples);
      return kvBlocks !== undefined ? { load, kvBlocks } : { load };
    },
  },
  kvCapacity: noCapacity,
  check(entry, { model }) {
    return model?.prefix_caching_hash_algo
      ? [{ severity: "warning", key: "kind", message: `models[].prefix_caching_hash_algo ${model.prefix_caching_hash_algo} is a vLLM flag; SGLang engines of ${model.name} ignore it` }]
      : [];
  },
  recover: sameLaunch,
};
