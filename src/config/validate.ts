// Checks across keys that the per-key schema cannot express: references between sections, rules that
// depend on an engine's kind, and resources (ports, GPUs) that must not be claimed twice. Pure: takes
// a resolved Config plus a path → line lookup and returns findings.

import { didYouMean, type Finding, type Severity } from "./findings.ts";
import { isWildcardHost, parseHostPort } from "./checks.ts";
import type { Config, EngineConfig } from "./types.ts";

export type LineOf = (path: string) => number;

export function validateConfig(config: Config, lineOf: LineOf = () => 0): Finding[] {
  const out: Finding[] = [];
  const add = (severity: Severity, path: string, message: string) =>
    out.push({ path, line: lineOf(path), message, severity });

  checkModels(config, add);
  checkTokenizers(config, add);
  config.engines.forEach((e, i) => checkEngine(config, e, `engines[${i}]`, add));
  checkPorts(config, add);
  checkGpus(config, add);
  checkPd(config, add);

  const s = config.supervisor;
  if (s.restart_backoff_initial_ms > s.restart_backoff_max_ms)
    add("error", "supervisor.restart_backoff_initial_ms", `must not exceed restart_backoff_max_ms (${s.restart_backoff_max_ms})`);
  if (config.engines.length === 0) add("warning", "engines", "no engines configured: this node serves no model");
  return out;
}

type Add = (severity: Severity, path: string, message: string) => void;

// P/D (issue 13): herd configures the transfer for vllm, sglang and sim engines (src/pd/engine-flags.ts);
// a prefill engine needs a decode engine of the same model, or nothing ever reads its KV.
const PD_KINDS = ["vllm", "sglang", "sim", "external"];
function checkPd(config: Config, add: Add): void {
  config.engines.forEach((e, i) => {
    if (e.role === "aggregated") return;
    if (!PD_KINDS.includes(e.kind)) add("warning", `engines[${i}].role`, `herd sets no P/D flags for kind ${e.kind}: pass them in args (herd still routes it as a ${e.role} worker)`);
    if (e.role === "prefill" && !config.engines.some((d) => d.model === e.model && d.role === "decode")) {
      add("warning", `engines[${i}].role`, `no decode engine serves ${JSON.stringify(e.model)}: prefill workers get no traffic until one exists`);
    }
  });
}

// Prefix-aware routing hashes the tokens the engine will see. The built-in tokenizer only matches
// the simulated engine, so a real engine's model without a tokenizer dir would never show overlap.
function checkTokenizers(config: Config, add: Add): void {
  const prefixAware = config.router.policy === "kv" || config.router.policy === "prefix";
  if (!prefixAware) return;
  config.models.forEach((m, i) => {
    if (m.tokenizer !== "") return;
    const real = config.engines.find((e) => e.model === m.name && e.kind !== "sim");
    if (real)
      add("warning", `models[${i}].tokenizer`, `policy ${config.router.policy} needs the model's tokenizer dir to match ${real.kind} engines' blocks; without it no prefix overlap is found`);
  });
}

function checkModels(config: Config, add: Add): void {
  const first = new Map<string, number>();
  config.models.forEach((m, i) => {
    const prev = first.get(m.name);
    if (prev !== undefined) add("error", `models[${i}].name`, `duplicate model name ${JSON.stringify(m.name)} (also models[${prev}])`);
    else first.set(m.name, i);
  });
}

function checkEngine(config: Config, e: EngineConfig, p: string, add: Add): void {
  const names = config.models.map((m) => m.name);
  if (!names.includes(e.model)) {
    const known = names.length ? `defined models: ${names.join(", ")}` : "no models are defined (add a models: entry)";
    add("error", `${p}.model`, `unknown model ${JSON.stringify(e.model)}${didYouMean(e.model, names)}; ${known}`);
  }
  const onlyFor = (key: string, kinds: string) => add("error", `${p}.${key}`, `only valid for kind ${kinds}, not ${e.kind}`);
  if (e.kind === "external") {
    if (e.url === "") add("error", `${p}.url`, "missing required key: kind external needs the engine's base URL");
    if (e.count !== 1) add("error", `${p}.count`, "must be 1 for kind external (one URL is one engine)");
    if (e.port !== 0) add("error", `${p}.port`, "not used by kind external (herd reaches it at url)");
    if (e.gpus.length) add("error", `${p}.gpus`, "not used by kind external (herd does not start it)");
    if (e.args.length) add("error", `${p}.args`, "not used by kind external (herd does not start it)");
    if (Object.keys(e.env).length) add("error", `${p}.env`, "not used by kind external (herd does not start it)");
  } else if (e.url !== "") {
    onlyFor("url", "external");
  }
  if (e.kind === "command") {
    if (e.command.length === 0)
      add("error", `${p}.command`, "missing required key: kind command needs the argv to run, e.g. [my-server, --port, \"{port}\"]");
    else if (!e.command.some((a) => a.includes("{port}")) && e.port === 0)
      add("warning", `${p}.command`, "does not mention {port}, so the engine cannot learn the port herd allocated; set port or use {port}");
  } else if (e.command.length) {
    onlyFor("command", "command");
  }
  if (e.kind === "sim" && e.gpus.length) add("warning", `${p}.gpus`, "sim engines use no GPUs; the ids only set CUDA_VISIBLE_DEVICES");
}

function checkPorts(config: Config, add: Add): void {
  const listen = parseHostPort(config.frontend.listen);
  const taken: { first: number; last: number; host: string; owner: string }[] = [];
  if (listen && listen.port !== 0) taken.push({ first: listen.port, last: listen.port, host: listen.host, owner: "frontend.listen" });
  config.engines.forEach((e, i) => {
    if (e.kind === "external" || e.port === 0) return;
    const p = `engines[${i}].port`;
    const last = e.port + e.count - 1;
    if (last > 65535) {
      add("error", p, `port ${e.port} + count ${e.count} runs past 65535`);
      return;
    }
    const clash = taken.find(
      (t) => e.port <= t.last && t.first <= last && (t.host === e.host || isWildcardHost(t.host) || isWildcardHost(e.host)),
    );
    const range = (a: number, b: number) => (a === b ? `port ${a}` : `ports ${a}-${b}`);
    const verb = e.count === 1 ? "overlaps" : "overlap";
    if (clash) add("error", p, `${range(e.port, last)} ${verb} ${clash.owner} (${range(clash.first, clash.last)})`);
    taken.push({ first: e.port, last, host: e.host, owner: `engines[${i}]` });
  });
}

function checkGpus(config: Config, add: Add): void {
  const owner = new Map<number, number>();
  config.engines.forEach((e, i) => {
    const p = `engines[${i}].gpus`;
    if (e.gpus.length && e.gpus.length % e.count !== 0)
      add("error", p, `${e.gpus.length} GPUs cannot be split evenly across count ${e.count} engines`);
    const seen = new Set<number>();
    for (const g of e.gpus) {
      if (seen.has(g)) add("error", p, `GPU ${g} is listed twice`);
      seen.add(g);
      const o = owner.get(g);
      if (o !== undefined && o !== i) add("warning", p, `GPU ${g} is also used by engines[${o}]; they will share its memory`);
      else owner.set(g, i);
    }
  });
}
