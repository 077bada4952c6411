// An engine herd routes to but does not start (`engines[].url`). Health and metrics are read like
// vLLM's, the most common server behind such a URL.
import type { DriverFinding, EngineDriver } from "../driver.ts";
import { httpOk, noCapacity } from "./common.ts";
import { vllm } from "./vllm.ts";

export const external: EngineDriver = {
  id: "engine.driver.external",
  kind: "external",
  managed: false,
  usesGpus: false,
  wantsKvPorts: false,
  pdFlow: null,
  tier: null,
  lora: false,
  loadsModelPath: false,
  builtinTokenizer: false,
  ownKeys: ["url"],
  launch: () => null,
  health: httpOk,
  metrics: vllm.metrics,
  kvCapacity: noCapacity,
  check(e) {
    const out: DriverFinding[] = [];
    const unused = (key: string) => out.push({ severity: "error", key, message: "not used by kind external (herd does not start it)" });
    if (e.url === "") out.push({ severity: "error", key: "url", message: "missing required key: kind external needs the engine's base URL" });
    if (e.count !== 1) out.push({ severity: "error", key: "count", message: "must be 1 for kind external (one URL is one engine)" });
    if (e.port !== 0) out.push({ severity: "error", key: "port", message: "not used by kind external (herd reaches it at url)" });
    if (e.gpus.length) unused("gpus");
    if (e.args.length) unused("args");
    if (Object.keys(e.env).length) unused("env");
    return out;
  },
  // herd never started it, so there is nothing to adopt or kill.
  recover: () => false,
};
