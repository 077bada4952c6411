// Any server herd should start from a full argv (`engines[].command`), with {port}, {host},
// {model}, {model_path} and {block_size} substituted. herd knows nothing else about it: health is
// GET health_path → 200, load comes from vLLM-style /metrics when it has them.
import type { EngineDriver } from "../driver.ts";
import type { DriverInput } from "../types.ts";
import { httpOk, kvBindJson, makeSpec, noCapacity, sameLaunch } from "./common.ts";
import { vllm } from "./vllm.ts";

/** `{port}`, `{host}`, `{model}`, `{model_path}`, `{block_size}` in a command entry's argv. */
export function substitute(arg: string, input: DriverInput): string {
  const vars: Record<string, string> = {
    port: String(input.port),
    host: input.entry.host,
    model: input.model.name,
    model_path: input.model.path,
    block_size: String(input.model.block_size),
  };
  return arg.replace(/\{(\w+)\}/g, (m, k: string) => vars[k] ?? m);
}

export const command: EngineDriver = {
  id: "engine.driver.command",
  kind: "command",
  managed: true,
  // Unknown: it gets GPUs only when the entry names them.
  usesGpus: false,
  wantsKvPorts: false,
  pdFlow: null,
  tier: null,
  lora: false,
  loadsModelPath: true,
  builtinTokenizer: false,
  ownKeys: ["command"],
  launch(input) {
    if (input.entry.command.length === 0) throw new Error(`engine ${input.id}: kind command needs a non-empty command`);
    const argv = input.entry.command.map((a) => substitute(a, input));
    const kv = kvBindJson(input, true);
    return makeSpec(input, argv, input.model.name, kv?.spec);
  },
  health: httpOk,
  metrics: vllm.metrics,
  kvCapacity: noCapacity,
  check(e) {
    if (e.command.length === 0)
      return [{ severity: "error", key: "command", message: 'missing required key: kind command needs the argv to run, e.g. [my-server, --port, "{port}"]' }];
    if (!e.command.some((a) => a.includes("{port}")) && e.port === 0)
      return [{ severity: "warning", key: "command", message: "does not mention {port}, so the engine cannot learn the port herd allocated; set port or use {port}" }];
    return [];
  },
  recover: sameLaunch,
};
