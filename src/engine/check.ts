// Engine checks that need the drivers or the host (`herd config check`, `herd run`, `--dry-run`):
// each entry's kind-specific rules (drivers/<kind>.ts `check`), the rules that ask a kind's
// capabilities (P/D flow, sleep mode, LoRA, managed, built-in tokenizer: never its name), and the
// GPU plan against the GPUs this host has. Pure given the HostGpus.
import type { Finding } from "../config/findings.ts";
import type { Config } from "../config/types.ts";
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
  checkCapabilities(config, add);
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

type Add = (s: Finding["severity"], p: string, m: string) => void;

/** Rules that depend on what a kind can do, asked of its driver. */
function checkCapabilities(config: Config, add: Add): void {
  const sleepers = ALL_DRIVERS.filter((d) => d.sleep !== undefined).map((d) => d.kind);
  config.engines.forEach((e, i) => {
    const d = driverFor(e.kind);
    if (e.role !== "aggregated" && d.managed && d.pdFlow === null)
      add("warning", `engines[${i}].role`, `herd sets no P/D flags for kind ${e.kind}: pass them in args (herd still routes it as a ${e.role} worker)`);
    const model = config.models.find((m) => m.name === e.model);
    if (model && model.lora_adapters.length > 0 && d.managed && !d.lora)
      add("warning", `engines[${i}].kind`, `${e.kind} engines are started without models[${config.models.indexOf(model)}].lora_adapters: requests naming an adapter fail on them (pass the engine's LoRA flags in args)`);
  });
  config.planner.pools.forEach((pool, i) => {
    const entry = config.engines[pool.engine];
    if (!entry) return; // reported by the planner checks (src/config/planner-checks.ts)
    const d = driverFor(entry.kind);
    if (!d.managed) add("error", `planner.pools[${i}].engine`, `engines[${pool.engine}] is ${entry.kind}: herd does not start it, so the planner cannot scale it`);
    if (pool.can_sleep && d.sleep === undefined) add("error", `planner.pools[${i}].can_sleep`, `${entry.kind} engines have no sleep mode herd can drive (only ${sleepers.join(", ")})`);
  });
  // SLA mode sizes pools from the engines' step cost: a kind that does not carry its own needs a profile.
  const slo = config.planner.slo;
  if (slo && slo.profile === "") {
    const guessed = [...new Set(config.planner.pools.map((p) => config.engines[p.engine]).filter((e) => e !== undefined && driverFor(e.kind).managed && !driverFor(e.kind).stepCostOfArgs).map((e) => e!.kind))];
    if (guessed.length > 0)
      add("warning", "planner.slo.profile", `engines of kind ${guessed.join(", ")} would be sized from the built-in step cost (Qwen3-8B BF16 on one H100); fit theirs with \`herd bench --json\` + \`herd simulate --calibrate FILE --save PROFILE\` and name PROFILE here`);
  }
  // Prefix-aware routing hashes the tokens the engine will see. The built-in tokenizer only matches
  // kinds that tokenize with it (the simulated engine), so another kind's model without a tokenizer
  // dir would never show overlap.
  // (engine sits below router, so the names: the policies whose stages read block hashes.)
  const prefixAware = config.router.policy === "kv" || config.router.policy === "prefix" || config.router.policy === "predicted";
  if (prefixAware)
    config.models.forEach((m, i) => {
      if (m.tokenizer !== "") return;
      const real = config.engines.find((e) => e.model === m.name && !driverFor(e.kind).builtinTokenizer);
      if (real)
        add("warning", `models[${i}].tokenizer`, `policy ${config.router.policy} needs the model's tokenizer dir to match ${real.kind} engines' blocks; without it no prefix overlap is found`);
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
