// Load figures from Prometheus text when the engine kind is not known (bench, old callers): the
// union of the vLLM and SGLang drivers' metric names. The scraper itself asks each worker's driver
// (drivers/<kind>.ts `metrics`).
import type { EngineLoad } from "../driver.ts";
import { SGLANG_LOAD } from "../drivers/sglang.ts";
import { VLLM_LOAD } from "../drivers/vllm.ts";
import { foldPromLoad, promLoadNameSet, type PromLoadNames } from "./prom-load.ts";
import type { Sample } from "./prom-text.ts";

export type { EngineLoad } from "../driver.ts";

const ANY: PromLoadNames = {
  running: [...VLLM_LOAD.running, ...SGLANG_LOAD.running],
  waiting: [...VLLM_LOAD.waiting, ...SGLANG_LOAD.waiting],
  // vLLM's current name, then SGLang's, then vLLM's pre-0.10 name.
  kvUsage: [VLLM_LOAD.kvUsage[0]!, ...SGLANG_LOAD.kvUsage, ...VLLM_LOAD.kvUsage.slice(1)],
};

export const ENGINE_LOAD_METRICS: ReadonlySet<string> = promLoadNameSet(ANY);

/** Fold samples into load figures; null when none of the known metrics is present. */
export function engineLoad(samples: readonly Sample[]): EngineLoad | null {
  return foldPromLoad(samples, ANY);
}
