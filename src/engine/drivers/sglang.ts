// SGLang (`python3 -m sglang.launch_server …`). Flags: sglang python/sglang/srt/server_args.py;
// metric names: python/sglang/srt/metrics/collector.py.
import type { EngineDriver } from "../driver.ts";
import { foldPromLoad, promLoadNameSet, type PromLoadNames } from "../telemetry/prom-load.ts";
import { parsePromText } from "../telemetry/prom-text.ts";
import { httpOk, kvBindJson, makeSpec, noCapacity, sameLaunch } from "./common.ts";

export const SGLANG_LOAD: PromLoadNames = {
  running: ["sglang:num_running_reqs"],
  waiting: ["sglang:num_queue_reqs"],
  kvUsage: ["sglang:token_usage"],
};
const NAMES: ReadonlySet<string> = promLoadNameSet(SGLANG_LOAD);

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
    read: (body) => ({ load: foldPromLoad(parsePromText(body, { names: NAMES }).samples, SGLANG_LOAD) }),
  },
  kvCapacity: noCapacity,
  check(entry, { model }) {
    return model?.prefix_caching_hash_algo
      ? [{ severity: "warning", key: "kind", message: `models[].prefix_caching_hash_algo ${model.prefix_caching_hash_algo} is a vLLM flag; SGLang engines of ${model.name} ignore it` }]
      : [];
  },
  recover: sameLaunch,
};
