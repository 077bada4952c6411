// Options of the simulated engine and their command-line flags (`herd sim-engine --flag value` or
// `--flag=value`). Every timing figure is a flag; defaults model Qwen3-8B BF16 on one H100 under vLLM
// (README.md in this folder gives the sources).

import { DEFAULT_COST, ZERO_COST, type CostParams } from "./cost.ts";
import { type KvEventsConfig, parseKvEventsConfig } from "./kv-publisher.ts";
import { type KvTransferConfig, parseKvTransferConfig } from "./kv-transfer-config.ts";
import { parseRespUrl } from "./resp-client.ts";

export interface SimEngineOptions {
  host: string;
  /** 0 = an ephemeral port (printed in the readiness lines and returned by startSimEngine). */
  port: number;
  /** Served model name (what /v1/models lists and clients send). */
  model: string;
  /** The model path vLLM was started with (/v1/models `root`); null = the served name. */
  modelPath: string | null;
  /** vLLM's --lora-modules: adapters served beside the base model (a request names one as its model). */
  loraModules: { name: string; path: string }[];
  /**
   * POST /v1/load_lora_adapter and /v1/unload_lora_adapter are served (vLLM mounts them only with
   * VLLM_ALLOW_RUNTIME_LORA_UPDATING=True; the sim reads the same variable at start).
   */
  runtimeLora: boolean;
  /** Directory with tokenizer.json (+ tokenizer_config.json); null = built-in fallback tokenizer. */
  tokenizer: string | null;
  blockSize: number;
  kvBlocks: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  /** vLLM's --scheduling-policy: fcfs, or priority (the requests' `priority` field, lower first). */
  schedulingPolicy: "fcfs" | "priority";
  /** Bound of the waiting queue; beyond it requests get 503. */
  maxWaiting: number;
  maxModelLen: number;
  /** Durations are divided by this. */
  timeScale: number;
  /** Seeds output text (and the block-hash chain when PYTHONHASHSEED is unset). */
  seed: number;
  /** Output length at which the simulated model emits EOS unless ignore_eos (0 = never). */
  outputLen: number;
  cost: CostParams;
  /** Requests after the Nth get 500. */
  failAfter: number | null;
  /** Requests after the Nth are accepted and never answered. */
  hangAfter: number | null;
  /** The process dies in the middle of the stream of request N+1. */
  crashAfter: number | null;
  /** "Loading" time: the port refuses connections until it has passed (vLLM's start-up lines spread over it). */
  startupDelayMs: number;
  /** vLLM's --kv-events-config; null = no KV event publisher. */
  kvEvents: KvEventsConfig | null;
  /** Event encoding: "map" (vLLM ≥ 0.24) or "array" (positional, vLLM ≤ 0.23). */
  kvEventsEncoding: "array" | "map";
  /** Share of KV event batches not published live (still replayable); seeded by --seed. */
  kvEventsDropFraction: number;
  /**
   * Sim only (not a vLLM flag): bind both KV sockets on this host instead of following vLLM's
   * wildcard rule, so a loopback engine's events stay on loopback (herd passes its engine host).
   */
  kvEventsBindHost: string | null;
  /** vLLM's --enable-sleep-mode: POST /sleep and /wake_up, GET /is_sleeping. */
  sleepMode: boolean;
  /** Sim only: how long POST /wake_up takes (vLLM reloads the weights from CPU RAM: seconds). */
  wakeDelayMs: number;
  /** vLLM's --kv-transfer-config (NixlConnector P/D); null = no KV connector. */
  kvTransfer: KvTransferConfig | null;
  /** VLLM_NIXL_SIDE_CHANNEL_HOST / _PORT; null = from the environment (defaults localhost / 5600, as vLLM). */
  sideChannelHost: string | null;
  sideChannelPort: number | null;
  /** Bytes a decode engine pulls per KV block (Qwen3-8B: 144 KiB/token × 16 = 2.25 MiB). */
  kvBytesPerBlock: number;
  /** Fault: side-channel pacing in bytes/s (0 = unpaced). */
  kvTransferBytesPerS: number;
  /** Fault: share of pulls cut off halfway. */
  kvTransferFailRate: number;
  /** Fault: share of held block sets that expire at once. */
  kvLeaseExpireRate: number;
  /** Fault: share of prefill legs (do_remote_decode) answered 500. */
  pdPrefillFailRate: number;
  /** A decode engine gives up a pull after this long. */
  kvTransferTimeoutMs: number;
  /** SGLang's --disaggregation-mode: the sim then speaks SGLang's bootstrap P/D contract instead. */
  disaggregationMode: "prefill" | "decode" | null;
  /** SGLang's --disaggregation-bootstrap-port (prefill side; 0 = ephemeral, for tests). */
  disaggregationBootstrapPort: number;
  /** Sim only: herd's KV tier (`resp://host:port`) to offload evicted blocks to; null = no offload. */
  kvOffloadUrl: string | null;
  /** File holding the tier's AUTH password (kv_tier.resp.password_file); null = none. */
  kvOffloadPasswordFile: string | null;
  /** Bytes stored per offloaded block; null = --kv-bytes-per-block. */
  kvOffloadBytesPerBlock: number | null;
  /** Host→GPU load rate of offloaded blocks, GB/s (10^9 B/s). */
  kvOffloadLoadGbPerS: number;
  /** RESP commands in flight at most (offloads beyond it are dropped, lookups miss). */
  kvOffloadQueueMax: number;
}

/**
 * Default load rate of offloaded KV back to the GPU: PCIe 4.0 x16 carries 32 GB/s raw per direction
 * (PCI-SIG 4.0 spec); pinned host→device copies reach ~25 GB/s of it. Set it per host (PCIe 5: ~50).
 */
export const KV_OFFLOAD_LOAD_GB_PER_S = 25;

export const DEFAULT_OPTIONS: SimEngineOptions = {
  host: "127.0.0.1",
  port: 8000,
  model: "sim",
  modelPath: null,
  loraModules: [],
  runtimeLora: false,
  tokenizer: null,
  blockSize: 16,
  kvBlocks: 24_700,
  maxNumSeqs: 1024,
  maxNumBatchedTokens: 8192,
  schedulingPolicy: "fcfs",
  maxWaiting: 4096,
  maxModelLen: 40_960,
  timeScale: 1,
  seed: 0,
  outputLen: 256,
  cost: DEFAULT_COST,
  failAfter: null,
  hangAfter: null,
  crashAfter: null,
  startupDelayMs: 0,
  kvEvents: null,
  kvEventsEncoding: "map",
  kvEventsDropFraction: 0,
  kvEventsBindHost: null,
  sleepMode: false,
  wakeDelayMs: 0,
  kvTransfer: null,
  sideChannelHost: null,
  sideChannelPort: null,
  kvBytesPerBlock: 16 * 1024,
  kvTransferBytesPerS: 0,
  kvTransferFailRate: 0,
  kvLeaseExpireRate: 0,
  pdPrefillFailRate: 0,
  kvTransferTimeoutMs: 30_000,
  disaggregationMode: null,
  disaggregationBootstrapPort: 8998,
  kvOffloadUrl: null,
  kvOffloadPasswordFile: null,
  kvOffloadBytesPerBlock: null,
  kvOffloadLoadGbPerS: KV_OFFLOAD_LOAD_GB_PER_S,
  kvOffloadQueueMax: 4096,
};

/** Qwen3-8B's KV per 16-token block: 36 layers × 8 KV heads × 128 dims × 2 (K,V) × 2 B = 144 KiB per token. */
export const QWEN3_8B_KV_BYTES_PER_BLOCK = 144 * 1024 * 16;

/** The vLLM release whose wire formats the sim speaks (KV events as the v0.26.0 capture); /version answers it. */
export const VLLM_VERSION = "0.26.0";

/**
 * A realistic start-up for Qwen3-8B on one H100 under vLLM V1: ~45 s from process start to
 * "Application startup complete." (upb-cn/vllm-startup-profiler, A100, 7B, vLLM 0.10.1: 43–51 s
 * with a warm compile cache: bootstrap ~20 s, weights 7.5 s, torch.compile + graph load ~16 s,
 * KV profiling 2 s, CUDA graphs 0.3–8 s). `--realistic-startup` uses it; the default stays 0 so
 * the embedded `herd run` config and tests start at once. For herd simulate and the planner.
 */
export const REALISTIC_STARTUP_MS = 45_000;

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
