// The engine seam: what a driver produces (a LaunchSpec: argv, env, endpoints) from the resolved
// config, and what the supervisor runs. Drivers are pure; the supervisor does the processes.
import type { EngineConfig, EngineKind, ModelConfig, NodeConfig, Role, SupervisorConfig } from "../config/types.ts";

/** Where herd reads an engine's KV cache events (connect side, e.g. tcp://127.0.0.1:5601). */
export interface KvEventsSpec {
  endpoint: string;
  replayEndpoint: string;
  topic: string;
}

/** One engine process to start: everything needed to spawn and reach it. */
export interface LaunchSpec {
  /** Worker id, stable across restarts: `${node}/${kind}-${indexOfThatKind}`. */
  id: string;
  argv: string[];
  /** Variables added to herd's own environment (CUDA_VISIBLE_DEVICES, PYTHONHASHSEED, entry env). */
  env: Record<string, string>;
  /** Host the engine binds to. */
  host: string;
  port: number;
  /** Base URL herd connects to (a wildcard bind host becomes loopback). */
  url: string;
  healthPath: string;
  /** The model name the engine answers to in `model` fields and /v1/models. */
  servedModelName: string;
  kvEvents?: KvEventsSpec;
  /** This engine's share of the entry's GPUs. */
  gpus: number[];
}

/** One worker from one engines[] entry: a process to supervise, or an external URL (spec null). */
export interface EnginePlan {
  id: string;
  kind: EngineKind;
  model: string;
  role: Role;
  /** Index of the engines[] entry, and of this engine within the entry's `count`. */
  entryIndex: number;
  index: number;
  url: string;
  healthPath: string;
  kvEvents?: KvEventsSpec;
  spec: LaunchSpec | null;
}

/** Everything a driver needs for one engine; ports are already allocated by the planner. */
export interface DriverInput {
  id: string;
  node: NodeConfig;
  model: ModelConfig;
  entry: EngineConfig;
  supervisor: SupervisorConfig;
  /** Index within the entry (0 … count-1). */
  index: number;
  port: number;
  /** Allocated KV event ports (publisher, replay), present when the driver asked for them. */
  kvPorts?: { pub: number; replay: number };
  gpus: number[];
  /** argv prefix that re-invokes this herd executable (see self.ts). */
  self: string[];
  /** herd's drain (frontend.drain_timeout_ms): engines that drain on SIGTERM get as long. */
  drainMs: number;
  /** On-demand LoRA adapters one engine holds at once (frontend.lora.max_per_engine); absent = 4. */
  maxOnDemandLoras?: number;
  /** The planner may put this engine to sleep (planner.pools[].can_sleep): enable the engine's sleep mode. */
  sleepMode?: boolean;
}

export type { EngineDriver } from "./driver.ts";
