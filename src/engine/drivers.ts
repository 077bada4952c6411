// Engine drivers: one per kind, each a pure function from the resolved config to a LaunchSpec.
// Flags follow shared/reference/engine-launch-and-timing.md §A and engines.md §1.4/§6.1. Only flags
// every supported release accepts are generated; anything version-specific goes in entry `args`,
// which are appended last (argparse and click take the last occurrence of a repeated flag).
import type { EngineKind } from "../config/types.ts";
import type { DriverInput, EngineDriver, KvEventsSpec, LaunchSpec } from "./types.ts";

/** Address herd dials for an engine bound to `host` (a wildcard bind is reached over loopback). */
export function connectHost(host: string): string {
  if (host === "" || host === "0.0.0.0" || host === "*") return "127.0.0.1";
  if (host === "::" || host === "[::]") return "::1";
  return host;
}

export function baseUrl(host: string, port: number): string {
  const h = connectHost(host);
  return `http://${h.includes(":") ? `[${h}]` : h}:${port}`;
}

/** KV event topic naming the worker, after llm-d's `kv@<pod>@<model>` convention. */
export function kvTopic(id: string, model: string): string {
  return `kv@${id}@${model}`;
}

/** The loopback address an engine bound to `host` can keep its side sockets on; null when not loopback. */
export function loopbackBindHost(host: string): string | null {
  if (host === "localhost") return "127.0.0.1";
  if (host === "::1" || host === "[::1]") return "::1";
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host) ? host : null;
}

/**
 * The engine binds its publisher on `tcp://*:P`: vLLM binds only when the endpoint contains `*`
 * or `::` and otherwise *connects* out (engines.md §1.1), so a concrete address would not work.
 */
function kvBindJson(input: DriverInput, withEnableKey: boolean): { json: string; spec: KvEventsSpec } | undefined {
  const { entry, kvPorts } = input;
  const topic = entry.kv_events?.topic || kvTopic(input.id, input.model.name);
  let bindPub: string;
  let bindReplay: string;
  let spec: KvEventsSpec;
  if (entry.kv_events) {
    // Explicit endpoints: the engine gets them verbatim, herd dials them with wildcards resolved.
    bindPub = entry.kv_events.endpoint;
    bindReplay = entry.kv_events.replay_endpoint;
    const dial = (ep: string) => ep.replace(/\/\/(\*|0\.0\.0\.0)(?=:)/, `//${connectHost(input.entry.host)}`);
    spec = { endpoint: dial(bindPub), replayEndpoint: bindReplay ? dial(bindReplay) : "", topic };
  } else if (kvPorts) {
    bindPub = `tcp://*:${kvPorts.pub}`;
    bindReplay = `tcp://*:${kvPorts.replay}`;
    const h = connectHost(entry.host);
    spec = { endpoint: `tcp://${h}:${kvPorts.pub}`, replayEndpoint: `tcp://${h}:${kvPorts.replay}`, topic };
  } else {
    return undefined;
  }
  // Key order as in the reference examples; publisher is always explicit because older vLLM and
  // every SGLang default it to "null" (engines.md §1.4, §6.1).
  const cfg: Record<string, unknown> = withEnableKey ? { enable_kv_cache_events: true } : {};
  cfg.publisher = "zmq";
  cfg.endpoint = bindPub;
  if (bindReplay) cfg.replay_endpoint = bindReplay;
  cfg.topic = topic;
  return { json: JSON.stringify(cfg), spec };
}

/** CUDA_VISIBLE_DEVICES, PYTHONHASHSEED (same for every engine: block hashes must agree), entry env. */
export function engineEnv(input: DriverInput): Record<string, string> {
  const env: Record<string, string> = {};
  if (input.gpus.length > 0) env.CUDA_VISIBLE_DEVICES = input.gpus.join(",");
  env.PYTHONHASHSEED = String(input.supervisor.python_hash_seed);
  Object.assign(env, input.entry.env);
  return env;
}

function spec(input: DriverInput, argv: string[], servedModelName: string, kvEvents?: KvEventsSpec): LaunchSpec {
  const s: LaunchSpec = {
    id: input.id,
    argv: [...argv, ...input.entry.args],
    env: engineEnv(input),
    host: input.entry.host,
    port: input.port,
    url: baseUrl(input.entry.host, input.port),
    healthPath: input.entry.health_path,
    servedModelName,
    gpus: input.gpus,
  };
  if (kvEvents) s.kvEvents = kvEvents;
  return s;
}

const vllm: EngineDriver = {
  kind: "vllm",
  managed: true,
  wantsKvPorts: true,
  launch(input) {
    const { model, entry } = input;
    const argv = ["vllm", "serve", model.path, "--host", entry.host, "--port", String(input.port)];
    argv.push("--served-model-name", model.name, "--block-size", String(model.block_size));
    // Prefix caching is on by default in V1, but KV events need it, so say it explicitly.
    argv.push("--enable-prefix-caching");
    if (model.max_model_len > 0) argv.push("--max-model-len", String(model.max_model_len));
    if (input.gpus.length > 1) argv.push("--tensor-parallel-size", String(input.gpus.length));
    const kv = kvBindJson(input, true);
    if (kv) argv.push("--kv-events-config", kv.json);
    return spec(input, argv, model.name, kv?.spec);
  },
};

const sglang: EngineDriver = {
  kind: "sglang",
  managed: true,
  wantsKvPorts: true,
  launch(input) {
    const { model, entry } = input;
    const argv = ["python3", "-m", "sglang.launch_server", "--model-path", model.path];
    argv.push("--host", entry.host, "--port", String(input.port), "--served-model-name", model.name);
    // The page size default depends on the attention backend; pass it so event hashing is known.
    argv.push("--page-size", String(model.block_size));
    if (model.max_model_len > 0) argv.push("--context-length", String(model.max_model_len));
    if (input.gpus.length > 1) argv.push("--tp-size", String(input.gpus.length));
    // SGLang rejects unknown keys in newer builds, so no enable_kv_cache_events here (§6.1).
    const kv = kvBindJson(input, false);
    if (kv) argv.push("--kv-events-config", kv.json);
    // Without it /metrics is empty (§A.4).
    argv.push("--enable-metrics");
    return spec(input, argv, model.name, kv?.spec);
  },
};

const trtllm: EngineDriver = {
  kind: "trtllm",
  managed: true,
  // KV events live in trtllm's YAML (`--config`) and their payload's vLLM compatibility is
  // unverified (§A.5); until tested against a real peer, trtllm workers are routed without them.
  wantsKvPorts: false,
  launch(input) {
    const { model, entry } = input;
    const argv = ["trtllm-serve", model.path, "--host", entry.host, "--port", String(input.port)];
    if (model.max_model_len > 0) argv.push("--max_seq_len", String(model.max_model_len));
    if (input.gpus.length > 1) argv.push("--tp_size", String(input.gpus.length));
    // trtllm-serve has no --served-model-name: it answers to the model path.
    return spec(input, argv, model.path);
  },
};

/** `{port}`, `{host}`, `{model}`, `{model_path}`, `{block_size}` in a command entry's argv. */
export function substitute(arg: string, input: DriverInput): string {
  const vars: Record<string, string> = {
    port: String(input.port),
    host: input.entry.host,
    model: input.model.name,
    model_path: input.model.path,
    block_size: String(input.model.block_size),
  };
  return arg.replace(/\{(\w+)\}/g, (m, k: string) => vars[k] ?? m);
}

const command: EngineDriver = {
  kind: "command",
  managed: true,
  wantsKvPorts: false,
  launch(input) {
    if (input.entry.command.length === 0) throw new Error(`engine ${input.id}: kind command needs a non-empty command`);
    const argv = input.entry.command.map((a) => substitute(a, input));
    const kv = kvBindJson(input, true);
    return spec(input, argv, input.model.name, kv?.spec);
  },
};

const sim: EngineDriver = {
  kind: "sim",
  managed: true,
  // The simulated engine publishes KV events exactly like vLLM, so it takes the same JSON.
  wantsKvPorts: true,
  launch(input) {
    const { model, entry } = input;
    const argv = [...input.self, "sim-engine", "--host", entry.host, "--port", String(input.port)];
    argv.push("--model", model.name, "--block-size", String(model.block_size));
    if (model.max_model_len > 0) argv.push("--max-model-len", String(model.max_model_len));
    if (model.tokenizer) argv.push("--tokenizer", model.tokenizer);
    const kv = kvBindJson(input, true);
    if (kv) argv.push("--kv-events-config", kv.json);
    // Safe by default (R15): vLLM can only bind `*` (every interface), the sim can do better; for a
    // loopback engine its generated KV sockets stay on loopback. Explicit kv_events are verbatim.
    const bindHost = loopbackBindHost(entry.host);
    if (kv && !entry.kv_events && bindHost) argv.push("--kv-events-bind-host", bindHost);
    const s = spec(input, argv, model.name, kv?.spec);
    // Lets a sim engine notice that its herd died (SIGKILL) and stop, instead of lingering. An entry
    // may set it to "" to behave like a real engine (tests of the orphan sweep do).
    if (!("HERD_SUPERVISOR_PID" in entry.env)) s.env.HERD_SUPERVISOR_PID = String(process.pid);
    return s;
  },
};

const external: EngineDriver = {
  kind: "external",
  managed: false,
  wantsKvPorts: false,
  launch: () => null,
};

const DRIVERS: Record<EngineKind, EngineDriver> = { sim, vllm, sglang, trtllm, command, external };

export function driverFor(kind: EngineKind): EngineDriver {
  return DRIVERS[kind];
}
