// The one list of engine drivers. A new kind: one file in this folder, one line here, its name in
// config ENGINE_KINDS (the Record type below fails to compile until all three agree).
import type { EngineKind } from "../../config/types.ts";
import type { EngineDriver } from "../driver.ts";
import type { EnginePlan } from "../types.ts";
import { command } from "./command.ts";
import { external } from "./external.ts";
import { sglang } from "./sglang.ts";
import { sim } from "./sim.ts";
import { trtllm } from "./trtllm.ts";
import { vllm } from "./vllm.ts";

const DRIVERS: Record<EngineKind, EngineDriver> = { sim, vllm, sglang, trtllm, command, external };

export const ALL_DRIVERS: readonly EngineDriver[] = Object.values(DRIVERS);

export function driverFor(kind: EngineKind): EngineDriver {
  return DRIVERS[kind];
}

/**
 * KV capacity in blocks known before the engine runs (sim: --kv-blocks or its default; vLLM:
 * --num-gpu-blocks-override), so the KV index can be sized up front; undefined otherwise. Running
 * engines report theirs in /metrics (MetricsScraper `onKvCapacity`): vLLM and the sim in
 * vllm:cache_config_info, SGLang in sglang:num_pages (or tokens / page size), TRT-LLM in its JSON
 * stats. A worker whose capacity is never stated sizes its tables at its first eviction
 * (src/kv/ingest.ts `selfSize`).
 */
export function kvCapacityHint(p: Pick<EnginePlan, "kind" | "spec">): number | undefined {
  return p.spec ? driverFor(p.kind).kvCapacity(p.spec) : undefined;
}
