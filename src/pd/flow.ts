// Which P/D flow an engine speaks — in one place, read from the config for now, so it can read the
// engine driver's declared capability once drivers declare one (issue 19):
//   vllm           NixlConnector: prefill leg first, its kv_transfer_params feed the decode leg;
//   sglang         SGLang's bootstrap flow (sgl-router's PD mode, mini_lb): one body with
//                  bootstrap_host/port/room to both workers at once;
//   sim            either: SGLang's when its entry's args ask for SGLang's disaggregation mode
//                  (`--disaggregation-mode`, as a real sglang server is told), else vLLM's.
// A model's flow is its prefill engines' (all alike, else the model is not P/D); its decode
// engines are launched for that flow too.
import type { Config, EngineConfig, EngineKind } from "../config/types.ts";
import type { PdFlow } from "./orchestrator.ts";

/** The flow of a worker known only by its kind (another node's): a sim is taken for vLLM's. */
export function pdFlowOfKind(kind: EngineKind): PdFlow | null {
  if (kind === "vllm" || kind === "sim") return "vllm";
  if (kind === "sglang") return "sglang";
  return null;
}

/** The flow an engine entry speaks. */
export function pdFlowOfEntry(entry: Pick<EngineConfig, "kind" | "args">): PdFlow | null {
  if (entry.kind === "sim" && entry.args.includes("--disaggregation-mode")) return "sglang";
  return pdFlowOfKind(entry.kind);
}

/** The P/D flow of `model` in this config: its prefill engines' (null: none, or they differ). */
export function modelFlow(config: Pick<Config, "engines">, model: string): PdFlow | null {
  const flows = new Set(config.engines.filter((e) => e.model === model && e.role === "prefill").map((e) => pdFlowOfEntry(e)));
  if (flows.size !== 1) return null;
  return [...flows][0]!;
}

/** The kind whose P/D launch flags and ports an entry takes: SGLang's for a sim in SGLang's flow. */
export function pdLaunchKind(config: Pick<Config, "engines">, entry: EngineConfig): EngineKind {
  return entry.kind === "sim" && modelFlow(config, entry.model) === "sglang" ? "sglang" : entry.kind;
}
