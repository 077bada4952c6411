// vLLM (`vllm serve MODEL …`). Flags checked against vllm-project/vllm: FrontendArgs in
// vllm/entrypoints/openai/cli_args.py (--disable-access-log-for-endpoints), CacheConfig in
// vllm/config/cache.py (--prefix-caching-hash-algo, --gpu-memory-utilization,
// --num-gpu-blocks-override, num_gpu_blocks exported as a `vllm:cache_config_info` label),
// EngineArgs.shutdown_timeout (--shutdown-timeout, seconds; 0 aborts in-flight requests on SIGTERM;
// v0.18.0 and later). Metric names: vllm/v1/metrics/loggers.py. Sleep mode (docs/features/sleep_mode.md):
// `--enable-sleep-mode` plus VLLM_SERVER_DEV_MODE=1 expose POST /sleep?level=1 (weights offloaded
// to CPU RAM, KV cache discarded), POST /wake_up and GET /is_sleeping. Tracing: ObservabilityConfig
// in vllm/config/observability.py (--otlp-traces-endpoint); vllm/tracing.py picks its exporter by
// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL (grpc by default, or http/protobuf) and continues the
// request's `traceparent` header, which herd sends per attempt.
import type { EngineDriver, DriverFinding } from "../driver.ts";
import { foldPromLoad, promLoadNameSet, type PromLoadNames } from "../telemetry/prom-load.ts";
import { parsePromText } from "../telemetry/prom-text.ts";
import { httpOk, kvBindJson, lastFlag, makeSpec, positiveIntFlag, sameLaunch } from "./common.ts";

export const VLLM_LOAD: PromLoadNames = {
  running: ["vllm:num_requests_running"],
  waiting: ["vllm:num_requests_waiting"],
  // vllm:gpu_cache_usage_perc is the pre-0.10 name, read when the new one is absent.
  kvUsage: ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
};
const CACHE_INFO = "vllm:cache_config_info";
const NAMES: ReadonlySet<string> = new Set([...promLoadNameSet(VLLM_LOAD), CACHE_INFO]);

/**
 * herd's router never reproduces an engine's block hashes: it re-hashes each event's token ids
 * with XXH3-64 (src/kv/hash.ts) and keeps the engine's hash only as the id of that block on that
 * worker. What it needs from the engine's algorithm is that every engine of a model names the same
 * block alike (P/D transfers and removals use those ids), as 64-bit integers. These are the values
 * current vLLM accepts; `builtin` (Python hash()) and `sha256_cbor_64bit` were removed.
 */
export const ROUTER_COMPATIBLE_HASH_ALGOS: ReadonlySet<string> = new Set(["sha256", "sha256_cbor", "xxhash", "xxhash_cbor"]);

/** Endpoints whose uvicorn access-log lines vLLM drops: herd polls both every few seconds. */
export const QUIET_ENDPOINTS = "/health,/metrics";

export const vllm: EngineDriver = {
  id: "engine.driver.vllm",
  kind: "vllm",
  managed: true,
  usesGpus: true,
  wantsKvPorts: true,
  pdFlow: "vllm-nixl",
  tier: "lmcache-vllm",
  lora: true,
  // vllm/engine/arg_utils.py --scheduling-policy {fcfs,priority}; with fcfs a nonzero priority is a 400.
  requestPriority: (args) => lastFlag(args, "--scheduling-policy") === "priority",
  loadsModelPath: true,
  builtinTokenizer: false,
  ownKeys: [],
  launch(input) {
    const { model, entry } = input;
    const argv = ["vllm", "serve", model.path, "--host", entry.host, "--port", String(input.port)];
    argv.push("--served-model-name", model.name, "--block-size", String(model.block_size));
    // Prefix caching is on by default in V1, but KV events need it, so say it explicitly.
    argv.push("--enable-prefix-caching");
    if (model.prefix_caching_hash_algo) argv.push("--prefix-caching-hash-algo", model.prefix_caching_hash_algo);
    if (entry.gpu_memory_utilization > 0) argv.push("--gpu-memory-utilization", String(entry.gpu_memory_utilization));
    if (model.max_model_len > 0) argv.push("--max-model-len", String(model.max_model_len));
    if (input.gpus.length > 1) argv.push("--tensor-parallel-size", String(input.gpus.length));
    // LoRA adapters: served under their own names (vllm/entrypoints/openai/cli_args.py --lora-modules
    // name=path); on-demand ones are loaded at run time by herd (src/frontend/lora.ts) through
    // /v1/load_lora_adapter, which vLLM mounts only with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True.
    const fixed = model.lora_adapters.filter((a) => !a.on_demand);
    const onDemand = model.lora_adapters.length > fixed.length;
    const env: Record<string, string> = input.sleepMode ? { VLLM_SERVER_DEV_MODE: "1" } : {};
    if (model.lora_adapters.length > 0) {
      argv.push("--enable-lora", "--max-loras", String(fixed.length + (onDemand ? (input.maxOnDemandLoras ?? 4) : 0)));
      if (fixed.length > 0) argv.push("--lora-modules", ...fixed.map((a) => `${a.name}=${a.path}`));
      if (onDemand) env.VLLM_ALLOW_RUNTIME_LORA_UPDATING = "True";
    }
    const kv = kvBindJson(input, true);
    if (kv) argv.push("--kv-events-config", kv.json);
    // herd stops routing, waits drain_timeout_ms, then SIGTERMs: the engine may finish what is left
    // (requests herd did not send) for as long, instead of aborting them (the default, 0).
    argv.push("--shutdown-timeout", String(Math.ceil(input.drainMs / 1000)));
    argv.push("--disable-access-log-for-endpoints", QUIET_ENDPOINTS);
    if (input.sleepMode) argv.push("--enable-sleep-mode");
    // herd's endpoint is OTLP/HTTP, so vLLM's exporter must not use its gRPC default.
    if (input.tracesEndpoint) {
      argv.push("--otlp-traces-endpoint", input.tracesEndpoint);
      env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL = "http/protobuf";
    }
    return makeSpec(input, argv, model.name, kv?.spec, Object.keys(env).length > 0 ? env : undefined);
  },
  health: httpOk,
  metrics: {
    path: "/metrics",
    format: "prometheus",
    names: NAMES,
    read(body) {
      const samples = parsePromText(body, { names: NAMES }).samples;
      const load = foldPromLoad(samples, VLLM_LOAD);
      // One series per DP engine (label `engine`); the worker's capacity is their sum.
      let blocks = 0;
      for (const s of samples) {
        if (s.name !== CACHE_INFO) continue;
        const n = Number(s.labels.num_gpu_blocks);
        if (Number.isInteger(n) && n > 0) blocks += n;
      }
      return blocks > 0 ? { load, kvBlocks: blocks } : { load };
    },
  },
  kvCapacity: (spec) => positiveIntFlag(spec.argv, "--num-gpu-blocks-override"),
  check(entry, { config, model }) {
    const out: DriverFinding[] = [];
    const fromArgs = lastFlag(entry.args, "--prefix-caching-hash-algo");
    if (fromArgs !== undefined && !ROUTER_COMPATIBLE_HASH_ALGOS.has(fromArgs)) {
      out.push({ severity: "error", key: "args", message: `--prefix-caching-hash-algo ${fromArgs}: herd's router needs one of ${[...ROUTER_COMPATIBLE_HASH_ALGOS].join(", ")} (stable 64-bit block ids on every engine; builtin and sha256_cbor_64bit are gone from vLLM)` });
    } else if (fromArgs !== undefined && model && model.prefix_caching_hash_algo && fromArgs !== model.prefix_caching_hash_algo) {
      out.push({ severity: "error", key: "args", message: `--prefix-caching-hash-algo ${fromArgs} contradicts models[${config.models.indexOf(model)}].prefix_caching_hash_algo ${model.prefix_caching_hash_algo}; set it once, on the model` });
    }
    if (entry.gpu_memory_utilization > 0 && lastFlag(entry.args, "--gpu-memory-utilization") !== undefined)
      out.push({ severity: "warning", key: "args", message: "--gpu-memory-utilization in args overrides gpu_memory_utilization; keep one" });
    // Every vLLM engine of a model must name a block with the same id (P/D transfers, removals and
    // the KV tier use engine block ids), so the algorithm must agree across a model's entries; the
    // first vLLM entry of the model is the reference. (The router re-hashes token ids, src/kv/hash.ts.)
    const algoOf = (e: typeof entry) => lastFlag(e.args, "--prefix-caching-hash-algo") ?? model?.prefix_caching_hash_algo ?? "";
    const first = config.engines.find((e) => e.kind === "vllm" && e.model === entry.model);
    if (first && first !== entry && algoOf(first) !== algoOf(entry)) {
      const [a, b] = [algoOf(entry) || "(vLLM default)", algoOf(first) || "(vLLM default)"];
      out.push({ severity: "error", key: "args", message: `prefix caching hash ${a} differs from engines[${config.engines.indexOf(first)}] (${b}) for model ${entry.model}: set models[].prefix_caching_hash_algo once` });
    }
    const drainS = Math.ceil(config.frontend.drain_timeout_ms / 1000);
    if (drainS * 1000 > config.supervisor.stop_timeout_ms)
      out.push({ severity: "warning", key: "supervisor.stop_timeout_ms", message: `shorter than the engine's --shutdown-timeout ${drainS} s (frontend.drain_timeout_ms): vLLM is SIGKILLed before its drain ends` });
    return out;
  },
  recover: sameLaunch,
  sleep: { sleepPath: "/sleep?level=1", wakePath: "/wake_up" },
};
