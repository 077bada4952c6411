// herd's simulated engine (`herd sim-engine …`, src/engine/sim): vLLM's API, metrics and KV events
// without a GPU.
import type { EngineDriver } from "../driver.ts";
import { parseSimArgs } from "../sim/options.ts";
import { httpOk, kvBindJson, lastFlag, loopbackBindHost, makeSpec, sameLaunch } from "./common.ts";
import { vllm } from "./vllm.ts";

export const sim: EngineDriver = {
  id: "engine.driver.sim",
  kind: "sim",
  managed: true,
  usesGpus: false,
  // The simulated engine publishes KV events exactly like vLLM, so it takes the same JSON.
  wantsKvPorts: true,
  pdFlow: "vllm-nixl",
  // The sim speaks both flows: SGLang's when its args ask for SGLang's disaggregation mode.
  pdFlowOfArgs: (args) => (args.includes("--disaggregation-mode") ? "sglang-bootstrap" : null),
  tier: "sim-offload",
  lora: true,
  // The sim engine takes vLLM's --scheduling-policy (src/engine/sim/scheduler.ts).
  requestPriority: (args) => lastFlag(args, "--scheduling-policy") === "priority",
  loadsModelPath: false,
  builtinTokenizer: true,
  stepCostOfArgs(args) {
    const o = parseSimArgs(args);
    if (!o) return null;
    const scale = o.timeScale > 0 ? o.timeScale : 1;
    const c = o.cost;
    const cost = { stepMs: c.stepMs / scale, weightsMs: c.weightsMs / scale, linearMsPerToken: c.linearMsPerToken / scale, pairMs: c.pairMs / scale, kvReadMsPerToken: c.kvReadMsPerToken / scale, requestMs: c.requestMs / scale };
    return { cost, maxNumBatchedTokens: o.maxNumBatchedTokens, maxNumSeqs: o.maxNumSeqs, kvTokens: o.kvBlocks * o.blockSize };
  },
  ownKeys: [],
  launch(input) {
    const { model, entry } = input;
    const argv = [...input.self, "sim-engine", "--host", entry.host, "--port", String(input.port)];
    argv.push("--model", model.name, "--block-size", String(model.block_size));
    // /v1/models `root` is the path the engine loaded, as vLLM reports it.
    if (model.path && model.path !== model.name) argv.push("--model-path", model.path);
    if (model.max_model_len > 0) argv.push("--max-model-len", String(model.max_model_len));
    if (model.tokenizer) argv.push("--tokenizer", model.tokenizer);
    // On-demand adapters are loaded at run time (src/frontend/lora.ts), as with vLLM.
    for (const a of model.lora_adapters) if (!a.on_demand) argv.push("--lora-modules", `${a.name}=${a.path}`);
    if (input.sleepMode) argv.push("--enable-sleep-mode");
    const kv = kvBindJson(input, true);
    if (kv) argv.push("--kv-events-config", kv.json);
    // Safe by default: vLLM can only bind `*` (every interface), the sim can do better; for a
    // loopback engine its generated KV sockets stay on loopback. Explicit kv_events are verbatim.
    const bindHost = loopbackBindHost(entry.host);
    if (kv && !entry.kv_events && bindHost) argv.push("--kv-events-bind-host", bindHost);
    const s = makeSpec(input, argv, model.name, kv?.spec);
    // Lets a sim engine notice that its herd died (SIGKILL) and stop, instead of lingering. An entry
    // may set it to "" to behave like a real engine (tests of the orphan sweep and recover do).
    if (!("HERD_SUPERVISOR_PID" in entry.env)) s.env.HERD_SUPERVISOR_PID = String(process.pid);
    if (model.lora_adapters.some((a) => a.on_demand)) s.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING = "True";
    return s;
  },
  health: httpOk,
  // Same /metrics as vLLM, including vllm:cache_config_info.
  metrics: vllm.metrics,
  kvCapacity(spec) {
    const at = spec.argv.indexOf("sim-engine");
    try {
      return at < 0 ? undefined : parseSimArgs(spec.argv.slice(at + 1))?.kvBlocks;
    } catch {
      // An argv the sim would reject: the engine will fail to start anyway; no hint.
      return undefined;
    }
  },
  check(entry) {
    return entry.gpus.length ? [{ severity: "warning", key: "gpus", message: "sim engines use no GPUs; the ids only set CUDA_VISIBLE_DEVICES" }] : [];
  },
  recover: sameLaunch,
  // vLLM's endpoints (src/engine/sim/routes.ts): asleep, generation is refused with 503.
  sleep: vllm.sleep!,
};
