// Which P/D flow an engine speaks, in one place. The kind's driver declares it (`EngineDriver.pdFlow`,
// src/engine/driver.ts) and may refine it from an entry's args (`pdFlowOfArgs`: a sim engine told
// `--disaggregation-mode` speaks SGLang's flow, as a real sglang server is told):
//   vllm    NixlConnector: prefill leg first, its kv_transfer_params feed the decode leg;
//   sglang  SGLang's bootstrap flow (sgl-router's PD mode, mini_lb): one body with
//           bootstrap_host/port/room to both workers at once.
// A model's flow is its prefill engines' (all alike, else the model is not P/D); its decode
// engines are launched for that flow too.
import type { Config, EngineConfig, EngineKind } from "../config/types.ts";
import type { EnginePdFlow } from "../engine/driver.ts";
import { driverFor } from "../engine/drivers/registry.ts";
import type { PdFlow } from "./orchestrator.ts";

const FLOW: Record<EnginePdFlow, PdFlow> = { "vllm-nixl": "vllm", "sglang-bootstrap": "sglang" };
const LAUNCH: Record<PdFlow, EnginePdFlow> = { vllm: "vllm-nixl", sglang: "sglang-bootstrap" };

/** The flow of a worker known only by its kind (another node's): its driver's declared flow. */
export function pdFlowOfKind(kind: EngineKind): PdFlow | null {
  const f = driverFor(kind).pdFlow;
  return f === null ? null : FLOW[f];
}

/** The flow an engine entry speaks. */
export function pdFlowOfEntry(entry: Pick<EngineConfig, "kind" | "args">): PdFlow | null {
  const d = driverFor(entry.kind);
  const f = d.pdFlowOfArgs?.(entry.args) ?? d.pdFlow;
  return f === null ? null : FLOW[f];
}

/** The P/D flow of `model` in this config: its prefill engines' (null: none, or they differ). */
export function modelFlow(config: Pick<Config, "engines">, model: string): PdFlow | null {
  const flows = new Set(config.engines.filter((e) => e.model === model && e.role === "prefill").map((e) => pdFlowOfEntry(e)));
  if (flows.size !== 1) return null;
  return [...flows][0]!;
}

/**
 * The flow whose launch flags and ports an entry takes: its model's flow when the entry's kind can
 * speak it (a sim decode engine of a model in SGLang's flow), else its own.
 */
export function pdLaunchFlow(config: Pick<Config, "engines">, entry: EngineConfig): EnginePdFlow | null {
  const own = driverFor(entry.kind).pdFlow;
  const model = modelFlow(config, entry.model);
  if (own === null || model === null) return own;
  return driverFor(entry.kind).pdFlowOfArgs ? LAUNCH[model] : own;
}
