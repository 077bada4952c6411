// Engine checks that need the drivers or the host (`herd config check`, `herd run`, `--dry-run`):
// each entry's kind-specific rules (drivers/<kind>.ts `check`), one prefix-caching hash algorithm
// per model, and the GPU plan against the GPUs this host has. Pure given the HostGpus.
import type { Finding } from "../config/findings.ts";
import type { Config } from "../config/types.ts";
import { lastFlag } from "./drivers/common.ts";
import { ALL_DRIVERS, driverFor } from "./drivers/registry.ts";
import type { EngineConfig } from "../config/types.ts";
import { assignGpus, type HostGpus } from "./gpus.ts";

export function checkEngines(config: Config, host: HostGpus, lineOf: (path: string) => number = () => 0): Finding[] {
  const out: Finding[] = [];
  const add = (severity: Finding["severity"], path: string, message: string) => out.push({ path, line: lineOf(path), message, severity });
  config.engines.forEach((entry, i) => {
    checkOwnKeys(entry, i, add);
    const model = config.models.find((m) => m.name === entry.model);
    for (const f of driverFor(entry.kind).check(entry, { config, model })) {
      const absolute = f.key.startsWith("models[") || f.key.startsWith("supervisor.") || f.key.startsWith("frontend.");
      add(f.severity, absolute ? f.key : `engines[${i}].${f.key}`, f.message);
    }
  });
  checkHashAlgos(config, add);
  for (const issue of assignGpus(config, host).issues) add(issue.severity, issue.path, issue.message);
  return dedupe(out);
}

/** `url` only for external, `command` only for command: keys a kind owns are errors elsewhere. */
function checkOwnKeys(e: EngineConfig, i: number, add: (s: Finding["severity"], p: string, m: string) => void): void {
  const mine = driverFor(e.kind).ownKeys;
  for (const key of ["url", "command"] as const) {
    if (mine.includes(key) || e[key].length === 0) continue;
    const owners = ALL_DRIVERS.filter((d) => d.ownKeys.includes(key)).map((d) => d.kind).join(", ");
    add("error", `engines[${i}].${key}`, `only valid for kind ${owners}, not ${e.kind}`);
  }
}

/**
 * Every vLLM engine of a model must name a block with the same id (P/D transfers, removals and
 * the KV tier use engine block ids), so `--prefix-caching-hash-algo` in args must agree across a
 * model's entries. The router itself re-hashes token ids (src/kv/hash.ts) and is not affected.
 */
function checkHashAlgos(config: Config, add: (s: Finding["severity"], p: string, m: string) => void): void {
  const seen = new Map<string, { algo: string; entry: number }>();
  config.engines.forEach((e, i) => {
    if (e.kind !== "vllm") return;
    const model = config.models.find((m) => m.name === e.model);
    const algo = lastFlag(e.args, "--prefix-caching-hash-algo") ?? model?.prefix_caching_hash_algo ?? "";
    const first = seen.get(e.model);
    if (!first) seen.set(e.model, { algo, entry: i });
    else if (first.algo !== algo)
      add("error", `engines[${i}].args`, `prefix caching hash ${algo || "(vLLM default)"} differs from engines[${first.entry}] (${first.algo || "(vLLM default)"}) for model ${e.model}: set models[].prefix_caching_hash_algo once`);
  });
}

function dedupe(fs: Finding[]): Finding[] {
  const keys = new Set<string>();
  return fs.filter((f) => {
    const k = `${f.severity}|${f.path}|${f.message}`;
    if (keys.has(k)) return false;
    keys.add(k);
    return true;
  });
}
