// An engine herd routes to but does not start (`engines[].url`). Health and metrics are read like
// vLLM's, the most common server behind such a URL.
import type { EngineDriver } from "../driver.ts";
import { httpOk, noCapacity, noChecks } from "./common.ts";
import { vllm } from "./vllm.ts";

export const external: EngineDriver = {
  id: "engine.driver.external",
  kind: "external",
  managed: false,
  usesGpus: false,
  wantsKvPorts: false,
  launch: () => null,
  health: httpOk,
  metrics: vllm.metrics,
  kvCapacity: noCapacity,
  // url/count/port/gpus rules are reported by config/validate.ts.
  check: noChecks,
  // herd never started it, so there is nothing to adopt or kill.
  recover: () => false,
};
