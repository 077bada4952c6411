// Compatibility re-exports: the drivers live in drivers/ (one file per kind, registry.ts lists them).
export { baseUrl, connectHost, kvTopic, loopbackBindHost, engineEnv } from "./drivers/common.ts";
export { substitute } from "./drivers/command.ts";
export { driverFor, ALL_DRIVERS } from "./drivers/registry.ts";

import type { EnginePlan } from "./types.ts";
import { driverFor as driverOf } from "./drivers/registry.ts";

/**
 * KV capacity in blocks known before the engine runs (sim: --kv-blocks or its default; vLLM:
 * --num-gpu-blocks-override), so the KV index can be sized up front; undefined otherwise. Running
 * vLLM engines report theirs in vllm:cache_config_info (MetricsScraper `onKvCapacity`).
 */
export function kvCapacityHint(p: Pick<EnginePlan, "kind" | "spec">): number | undefined {
  return p.spec ? driverOf(p.kind).kvCapacity(p.spec) : undefined;
}
