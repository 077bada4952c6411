// The simulated engine's command-line flags (`herd sim-engine --flag value` or `--flag=value`) and
// their parser. Every timing figure is a flag; the options and their defaults are in defaults.ts
// (re-exported here: importers take both from this file).

import { type CostParams, ZERO_COST } from "./cost.ts";
import { DEFAULT_OPTIONS, KV_OFFLOAD_LOAD_GB_PER_S, QWEN3_8B_KV_BYTES_PER_BLOCK, REALISTIC_STARTUP_MS, type SimEngineOptions } from "./defaults.ts";
import { parseKvEventsConfig } from "./kv-publisher.ts";
import { parseKvTransferConfig } from "./kv-transfer-config.ts";
import { parseRespUrl } from "./resp-client.ts";

export { DEFAULT_OPTIONS, KV_OFFLOAD_LOAD_GB_PER_S, QWEN3_8B_KV_BYTES_PER_BLOCK, REALISTIC_STARTUP_MS, type SimEngineOptions, VLLM_VERSION } from "./defaults.ts";

export class UsageError extends Error {
  override name = "UsageError";
}

type Kind = "int" | "num" | "str" | "bool";
interface Flag {
  kind: Kind;
  help: string;
  set(o: SimEngineOptions, v: string | number | boolean): void;
}

const cost = (k: keyof CostParams) => (o: SimEngineOptions, v: string | number | boolean) => void (o.cost = { ...o.cost, [k]: v as number });

export const FLAGS: Record<string, Flag> = {
  host: { kind: "str", help: "bind address (default 127.0.0.1)", set: (o, v) => void (o.host = v as string) },
  port: { kind: "int", help: "port; 0 = ephemeral (default 8000)", set: (o, v) => void (o.port = v as number) },
  model: { kind: "str", help: "served model name (default sim)", set: (o, v) => void (o.model = v as string) },
  "served-model-name": { kind: "str", help: "same as --model (vLLM's name)", set: (o, v) => void (o.model = v as string) },
  "model-path": { kind: "str", help: "model path vLLM loaded: /v1/models root (default: the served name)", set: (o, v) => void (o.modelPath = v as string) },
  "lora-modules": {
    kind: "str",
    help: "LoRA adapters, vLLM's name=path pairs (space or comma separated)",
    set: (o, v) => {
      for (const item of (v as string).split(/[\s,]+/).filter((x) => x !== "")) {
        const eq = item.indexOf("=");
        if (eq <= 0 || eq === item.length - 1) throw new UsageError(`--lora-modules: expected name=path, got ${JSON.stringify(item)}`);
        o.loraModules = [...o.loraModules, { name: item.slice(0, eq), path: item.slice(eq + 1) }];
      }
    },
  },
  tokenizer: { kind: "str", help: "dir with tokenizer.json (+ tokenizer_config.json); default built-in", set: (o, v) => void (o.tokenizer = v as string) },
  "block-size": { kind: "int", help: "KV block size in tokens (16)", set: (o, v) => void (o.blockSize = v as number) },
  "kv-blocks": { kind: "int", help: "KV capacity in blocks (24700 ≈ 395k tokens)", set: (o, v) => void (o.kvBlocks = v as number) },
  "max-num-seqs": { kind: "int", help: "sequences per batch (1024)", set: (o, v) => void (o.maxNumSeqs = v as number) },
  "max-num-batched-tokens": { kind: "int", help: "token budget per step, chunked prefill (8192)", set: (o, v) => void (o.maxNumBatchedTokens = v as number) },
  "scheduling-policy": {
    kind: "str",
    help: "fcfs or priority: vLLM's --scheduling-policy (priority: requests' `priority`, lower first) (fcfs)",
    set: (o, v) => {
      if (v !== "fcfs" && v !== "priority") throw new UsageError(`--scheduling-policy: expected fcfs or priority, got ${JSON.stringify(v)}`);
      o.schedulingPolicy = v;
    },
  },
  "max-waiting": { kind: "int", help: "waiting-queue bound; beyond it 503 (4096)", set: (o, v) => void (o.maxWaiting = v as number) },
  "max-model-len": { kind: "int", help: "context length (40960)", set: (o, v) => void (o.maxModelLen = v as number) },
  "time-scale": { kind: "num", help: "run X times faster than real time (1)", set: (o, v) => void (o.timeScale = v as number) },
  seed: { kind: "int", help: "seed of the output text (0)", set: (o, v) => void (o.seed = v as number) },
  "output-len": { kind: "int", help: "tokens before the model emits EOS unless ignore_eos; 0 = never (256)", set: (o, v) => void (o.outputLen = v as number) },
  "step-ms": { kind: "num", help: "per-step overhead, ms (1.5)", set: cost("stepMs") },
  "weights-ms": { kind: "num", help: "minimum step time: weight read, ms (5.9)", set: cost("weightsMs") },
  "token-ms": { kind: "num", help: "matmul time per token in a step, ms (0.0232)", set: cost("linearMsPerToken") },
  "pair-ms": { kind: "num", help: "prefill attention per token pair, ms (1.18e-6)", set: cost("pairMs") },
  "kv-token-ms": { kind: "num", help: "decode KV read per context token, ms (5.3e-5)", set: cost("kvReadMsPerToken") },
  "request-ms": { kind: "num", help: "API-server time per request before scheduling, ms (10)", set: cost("requestMs") },
  "zero-delay": { kind: "bool", help: "all timing figures 0 (overhead benchmarks)", set: (o) => void (o.cost = { ...ZERO_COST }) },
  "fail-after": { kind: "int", help: "requests after the Nth get 500", set: (o, v) => void (o.failAfter = v as number) },
  "hang-after": { kind: "int", help: "requests after the Nth are never answered", set: (o, v) => void (o.hangAfter = v as number) },
  "crash-after": { kind: "int", help: "exit in the middle of request N+1's stream", set: (o, v) => void (o.crashAfter = v as number) },
  "kv-events-config": {
    kind: "str",
    help: "vLLM's KV events JSON: publisher, endpoint, replay_endpoint, topic, buffer_steps",
    set: (o, v) => {
      try {
        o.kvEvents = parseKvEventsConfig(v as string);
      } catch (e) {
        throw new UsageError(`--kv-events-config: ${e instanceof Error ? e.message : String(e)}`);
      }
    },
  },
  "kv-events-encoding": {
    kind: "str",
    help: "KV event encoding: map (vLLM >= 0.24) or array (map)",
    set: (o, v) => {
      if (v !== "map" && v !== "array") throw new UsageError(`--kv-events-encoding: expected map or array, got ${JSON.stringify(v)}`);
      o.kvEventsEncoding = v;
    },
  },
  "kv-events-drop-fraction": {
    kind: "num",
    help: "fault: share of KV event batches not sent live, 0..1 (0)",
    set: (o, v) => {
      if ((v as number) > 1) throw new UsageError(`--kv-events-drop-fraction: must be at most 1, got ${v}`);
      o.kvEventsDropFraction = v as number;
    },
  },
  "kv-events-bind-host": {
    kind: "str",
    help: "bind the KV event sockets on this host (e.g. 127.0.0.1) instead of the endpoint's `*`",
    set: (o, v) => void (o.kvEventsBindHost = v as string),
  },
  "enable-sleep-mode": { kind: "bool", help: "vLLM's sleep mode: POST /sleep?level=1, POST /wake_up, GET /is_sleeping (asleep: generation gets 503)", set: (o) => void (o.sleepMode = true) },
  "wake-delay-ms": { kind: "int", help: "sleep mode: how long POST /wake_up takes (0)", set: (o, v) => void (o.wakeDelayMs = v as number) },
  "kv-transfer-config": {
    kind: "str",
    help: "vLLM's P/D JSON: kv_connector NixlConnector, kv_role, engine_id, kv_load_failure_policy, kv_connector_extra_config.kv_lease_duration",
    set: (o, v) => {
      try {
        o.kvTransfer = parseKvTransferConfig(v as string);
      } catch (e) {
        throw new UsageError(`--kv-transfer-config: ${e instanceof Error ? e.message : String(e)}`);
      }
    },
  },
  "kv-bytes-per-block": { kind: "int", help: `KV bytes a decode pulls per block (16384; Qwen3-8B ${QWEN3_8B_KV_BYTES_PER_BLOCK})`, set: (o, v) => void (o.kvBytesPerBlock = v as number) },
  "kv-transfer-bytes-per-s": { kind: "num", help: "fault: pace the side channel at N bytes/s (0 = unpaced)", set: (o, v) => void (o.kvTransferBytesPerS = v as number) },
  "kv-transfer-fail-rate": { kind: "num", help: "fault: share of KV pulls cut off halfway, 0..1 (0)", set: (o, v) => void (o.kvTransferFailRate = rate("kv-transfer-fail-rate", v)) },
  "kv-lease-expire-rate": { kind: "num", help: "fault: share of held prefill blocks expiring at once, 0..1 (0)", set: (o, v) => void (o.kvLeaseExpireRate = rate("kv-lease-expire-rate", v)) },
  "pd-prefill-fail-rate": { kind: "num", help: "fault: share of prefill legs (do_remote_decode) answered 500, 0..1 (0)", set: (o, v) => void (o.pdPrefillFailRate = rate("pd-prefill-fail-rate", v)) },
  "kv-transfer-timeout-ms": { kind: "int", help: "a decode gives up a KV pull after this long (30000)", set: (o, v) => void (o.kvTransferTimeoutMs = v as number) },
  "disaggregation-mode": {
    kind: "str",
    help: "SGLang P/D role: prefill | decode (bootstrap_host/port/room requests)",
    set: (o, v) => {
      if (v !== "prefill" && v !== "decode") throw new UsageError(`--disaggregation-mode: expected prefill or decode, got ${JSON.stringify(v)}`);
      o.disaggregationMode = v;
    },
  },
  "disaggregation-bootstrap-port": { kind: "int", help: "SGLang prefill bootstrap port (8998)", set: (o, v) => void (o.disaggregationBootstrapPort = v as number) },
  "disaggregation-transfer-backend": { kind: "str", help: "SGLang transfer backend (accepted; the sim always uses its own TCP transfer)", set: () => {} },
  "kv-offload-url": { kind: "str", help: "herd KV tier to offload evicted blocks to, resp://[:password@]host:port (none)", set: (o, v) => void (o.kvOffloadUrl = offloadUrl(v as string)) },
  "kv-offload-password-file": { kind: "str", help: "file with the tier's AUTH password (none)", set: (o, v) => void (o.kvOffloadPasswordFile = v as string) },
  "kv-offload-bytes-per-block": { kind: "int", help: "bytes stored per offloaded block (--kv-bytes-per-block)", set: (o, v) => void (o.kvOffloadBytesPerBlock = v as number) },
  "kv-offload-load-gb-per-s": { kind: "num", help: `load rate of offloaded blocks back to the GPU, GB/s (${KV_OFFLOAD_LOAD_GB_PER_S})`, set: (o, v) => void (o.kvOffloadLoadGbPerS = v as number) },
  "kv-offload-queue-max": { kind: "int", help: "tier commands in flight at most; offloads beyond are dropped (4096)", set: (o, v) => void (o.kvOffloadQueueMax = v as number) },
  "startup-delay-ms": { kind: "int", help: "load time: refuse connections this long before listening (0)", set: (o, v) => void (o.startupDelayMs = v as number) },
  "realistic-startup": { kind: "bool", help: `load time of Qwen3-8B on an H100 (${REALISTIC_STARTUP_MS / 1000} s) unless --startup-delay-ms`, set: (o) => void (o.startupDelayMs = REALISTIC_STARTUP_MS) },
};

function offloadUrl(v: string): string {
  try {
    parseRespUrl(v);
  } catch (e) {
    throw new UsageError(`--kv-offload-url: ${e instanceof Error ? e.message : String(e)}`);
  }
  return v;
}

function rate(name: string, v: string | number | boolean): number {
  if ((v as number) > 1) throw new UsageError(`--${name}: must be at most 1, got ${v}`);
  return v as number;
}

const POSITIVE = new Set(["kv-offload-queue-max", "kv-offload-bytes-per-block", "kv-transfer-timeout-ms", "block-size", "kv-blocks", "max-num-seqs", "max-num-batched-tokens", "max-waiting", "max-model-len"]);

function parseValue(name: string, kind: Kind, raw: string): string | number {
  if (kind === "str") return raw;
  const n = Number(raw);
  if (raw.trim() === "" || !Number.isFinite(n)) throw new UsageError(`--${name}: expected a number, got ${JSON.stringify(raw)}`);
  if (kind === "int" && !Number.isInteger(n)) throw new UsageError(`--${name}: expected an integer, got ${raw}`);
  if (n < 0) throw new UsageError(`--${name}: must not be negative, got ${raw}`);
  if (POSITIVE.has(name) && n === 0) throw new UsageError(`--${name}: must be at least 1`);
  if (name === "time-scale" && n === 0) throw new UsageError("--time-scale: must be greater than 0");
  if (name === "port" && n > 65535) throw new UsageError(`--port: must be at most 65535, got ${raw}`);
  return n;
}

/** Parse sim-engine flags. Returns null when --help was asked. Throws UsageError on bad input. */
export function parseSimArgs(argv: readonly string[]): SimEngineOptions | null {
  const o: SimEngineOptions = { ...DEFAULT_OPTIONS, cost: { ...DEFAULT_OPTIONS.cost } };
  let zeroDelay = false;
  let realistic = false;
  const later: [Flag, string | number | boolean][] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === "--help" || arg === "-h") return null;
    if (!arg.startsWith("--")) throw new UsageError(`unexpected argument ${JSON.stringify(arg)}`);
    const eq = arg.indexOf("=");
    const name = eq < 0 ? arg.slice(2) : arg.slice(2, eq);
    const flag = FLAGS[name];
    if (flag === undefined) throw new UsageError(`unknown flag --${name} (see herd sim-engine --help)`);
    if (flag.kind === "bool") {
      if (eq >= 0) throw new UsageError(`--${name} takes no value`);
      zeroDelay ||= name === "zero-delay";
      realistic ||= name === "realistic-startup";
      if (name === "enable-sleep-mode") o.sleepMode = true;
      continue;
    }
    const raw: string | undefined = eq < 0 ? argv[++i] : arg.slice(eq + 1);
    if (raw === undefined) throw new UsageError(`--${name} needs a value`);
    later.push([flag, parseValue(name, flag.kind, raw)]);
  }
  // --zero-delay first, so an explicit timing flag can still set one figure on top of it.
  if (zeroDelay) o.cost = { ...ZERO_COST };
  if (realistic) o.startupDelayMs = REALISTIC_STARTUP_MS;
  for (const [flag, v] of later) flag.set(o, v);
  return o;
}

export function simUsage(): string {
  const lines = ["herd sim-engine: a simulated vLLM-compatible engine (OpenAI API, /metrics, /health, /tokenize); no GPU", "", "Usage: herd sim-engine [options]", "", "Options:"];
  for (const [name, f] of Object.entries(FLAGS)) {
    const left = `  --${name}${f.kind === "bool" ? "" : f.kind === "str" ? " S" : " N"}`;
    lines.push(`${left.padEnd(32)}${f.help}`);
  }
  return lines.join("\n");
}
