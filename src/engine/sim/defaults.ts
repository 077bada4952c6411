// The simulated engine's options and their defaults (Qwen3-8B BF16 on one H100 under vLLM; README.md
// in this folder gives the sources), and the figures its flags quote. options.ts parses the flags
// into them and re-exports this file.

import { DEFAULT_COST, type CostParams } from "./cost.ts";
import type { KvEventsConfig } from "./kv-publisher.ts";
import type { KvTransferConfig } from "./kv-transfer-config.ts";

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
