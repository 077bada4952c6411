// The engine driver seam: everything herd knows about one engine kind, in one object. Modelled on
// nomad's task driver (hashicorp/nomad plugins/drivers/driver.go: StartTask, RecoverTask,
// Capabilities), cut down to what herd needs: drivers are pure (no I/O, no clock); the supervisor,
// the metrics scraper and `config check` call them.
import type { CostParams } from "./sim/cost.ts";
import type { Config, EngineConfig, EngineKind, ModelConfig } from "../config/types.ts";
import type { DriverInput, LaunchSpec } from "./types.ts";

/** Load figures an engine reports about itself (null: the engine does not report that figure). */
export interface EngineLoad {
  running: number | null;
  waiting: number | null;
  kv_usage: number | null;
}

/** What one /metrics body says: load, and the KV capacity in blocks when the engine tells it. */
export interface MetricsReading {
  load: EngineLoad | null;
  kvBlocks?: number;
}

/** A config problem specific to a kind; `key` is relative to the engines[] entry (e.g. "gpus"). */
export interface DriverFinding {
  severity: "error" | "warning";
  /** Key under `engines[i]` (e.g. "args"), or an absolute path starting with "models[" or "supervisor.". */
  key: string;
  message: string;
}

export interface CheckContext {
  config: Config;
  /** The entry's model (undefined when the entry names an unknown model: reported elsewhere). */
  model: ModelConfig | undefined;
}

/**
 * How an engine kind takes part in P/D (src/pd builds the launch flags and runs the legs per flow):
 * - `vllm-nixl`: vLLM's NixlConnector contract (`--kv-transfer-config`, VLLM_NIXL_SIDE_CHANNEL_*;
 *   prefill answers with `kv_transfer_params` the decode leg carries). One leg after the other.
 * - `sglang-bootstrap`: SGLang's `--disaggregation-mode` with a bootstrap server on the prefill
 *   worker; both legs at once, paired by bootstrap host/port/room.
 * null: herd sets no P/D flags for this kind (an operator may still pass them in args).
 */
export type EnginePdFlow = "vllm-nixl" | "sglang-bootstrap";

/**
 * How an engine kind uses this host's KV tier (src/tier builds the flags per connector):
 * - `sim-offload`: herd's sim engine offloads evicted blocks over RESP (`--kv-offload-url`).
 * - `lmcache-vllm`: vLLM with LMCache's connector, its remote backend the tier's RESP server.
 * null: the kind does not use the tier.
 */
export type EngineTierConnector = "sim-offload" | "lmcache-vllm";

/** A previous herd's engine, as recorded in data_dir/run/engines.json. */
export interface RecoverCandidate {
  worker: string;
  port: number;
  argvHash: string;
}

/**
 * One engine kind. A new kind is one file in drivers/ plus one line in drivers/registry.ts (and
 * its name in config ENGINE_KINDS). Everything outside drivers/ that differs per kind asks a
 * capability here (`pdFlow`, `tier`, `sleep`, `lora`, `loadsModelPath`, `builtinTokenizer`,
 * `managed`, …), never the kind's name.
 *
 * @example
 * ```ts
 * const vllm = driverFor("vllm");
 * const spec = vllm.launch(input);                  // argv, env, ports, KV event endpoints
 * vllm.health.healthy(200);                         // true: GET <url><health_path> answered 200
 * const r = vllm.metrics.read(await (await fetch(spec.url + vllm.metrics.path)).text());
 * r.load;     // { running: 3, waiting: 0, kv_usage: 0.41 }
 * r.kvBlocks; // 27104, from vllm:cache_config_info{num_gpu_blocks="27104"}
 * vllm.kvCapacity(spec);                            // --num-gpu-blocks-override if given, else undefined
 * vllm.check(entry, { config, model });             // [{ severity: "error", key: "args", message: "…" }]
 * vllm.recover(previous, spec);                     // true: same worker, port and argv → adopt it
 * ```
 */
export interface EngineDriver {
  /** Namespaced id for logs, e.g. `engine.driver.vllm`. */
  id: string;
  kind: EngineKind;
  /** Whether herd starts a process for this kind (false for `external`). */
  managed: boolean;
  /** Whether engines of this kind need GPUs (gets auto-assigned GPUs when `gpus` is absent). */
  usesGpus: boolean;
  /** Whether the planner should allocate KV event ports (publisher, replay) for this kind. */
  wantsKvPorts: boolean;
  /** P/D transfer contract herd configures for prefill/decode engines of this kind; null: none. */
  pdFlow: EnginePdFlow | null;
  /** A kind that can speak more than one flow picks it from an entry's args (the sim: SGLang's when told `--disaggregation-mode`); null: `pdFlow`. */
  pdFlowOfArgs?: (args: readonly string[]) => EnginePdFlow | null;
  /** How engines of this kind use the host's KV tier (`kv_tier.resp`); null: they do not. */
  tier: EngineTierConnector | null;
  /** Whether the launch serves models[].lora_adapters under their own names. */
  lora: boolean;
  /**
   * Whether an engine launched with these args schedules by the request's `priority` field (lower
   * first): herd then sends each leg its tenant's rank (src/frontend/engine-priority.ts). Absent: never.
   */
  requestPriority?: (args: readonly string[]) => boolean;
  /** Whether the engine reads models[].path itself (a local path must then exist on this host). */
  loadsModelPath: boolean;
  /** Whether the engine tokenizes with herd's built-in tokenizer (so no tokenizer dir is needed for prefix routing). */
  builtinTokenizer: boolean;
  /**
   * The engine's step cost and scheduler limits from its own flags (the simulated engine's timing
   * figures, divided by its time scale), for the planner's SLA mode; absent = only a calibrated
   * profile (`planner.slo.profile`) knows them. Throws on flags the engine itself would refuse.
   */
  stepCostOfArgs?: (args: readonly string[]) => { cost: CostParams; maxNumBatchedTokens: number; maxNumSeqs: number; kvTokens: number } | null;
  /** engines[] keys only this kind may set (e.g. `url` for external); set on another kind: an error. */
  ownKeys: readonly ("url" | "command")[];
  /** Command line and environment; null for unmanaged kinds. KV-event config is part of it. */
  launch(input: DriverInput): LaunchSpec | null;
  health: {
    /** Whether an answer with this HTTP status means "ready for traffic". */
    healthy(status: number): boolean;
  };
  metrics: {
    /** Path of the engine's metrics endpoint, relative to its base URL. */
    path: string;
    format: "prometheus" | "json";
    /** Metric names the reader needs (prometheus: lets the parser skip the rest). */
    names: ReadonlySet<string>;
    /** Fold one metrics body into load figures; never throws on malformed input. */
    read(body: string): MetricsReading;
  };
  /** KV capacity in blocks known from the command line alone; undefined when the engine decides. */
  kvCapacity(spec: LaunchSpec): number | undefined;
  /** Checks of an engines[] entry that only make sense for this kind. */
  check(entry: EngineConfig, ctx: CheckContext): DriverFinding[];
  /**
   * After a herd restart: may the previous herd's engine be adopted for this planned spec? Only
   * asked for engines whose process is still the recorded one; the supervisor then requires a good
   * health probe before it routes to the engine.
   */
  recover(previous: RecoverCandidate, spec: LaunchSpec): boolean;
  /**
   * The engine's sleep mode, for kinds that have one (the planner's idle step: wake in seconds
   * instead of a cold start): POST `sleepPath` frees the GPU and refuses work, POST `wakePath`
   * resumes. Launched with `DriverInput.sleepMode` so the endpoints exist. Absent: no sleep mode.
   */
  sleep?: { sleepPath: string; wakePath: string };
}
