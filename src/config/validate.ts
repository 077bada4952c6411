// Checks across keys that the per-key schema cannot express: references between sections and
// resources (ports, GPUs) that must not be claimed twice. Rules that depend on what an engine kind
// can do (P/D flags, sleep mode, LoRA, tokenizer, kind-specific keys) live with the engine drivers
// (src/engine/check.ts asks each driver's capabilities): config sits below engine and knows only
// the kind names and the keys the schema gives `external` (url) and `command`. Pure: takes
// a resolved Config plus a path → line lookup and returns findings.

import { didYouMean, type Finding, type Severity } from "./findings.ts";
import { isWildcardHost, parseHostPort } from "./checks.ts";
import type { Config, EngineConfig } from "./types.ts";
import { checkPlanner } from "./planner-checks.ts";

export type LineOf = (path: string) => number;

export function validateConfig(config: Config, lineOf: LineOf = () => 0): Finding[] {
  const out: Finding[] = [];
  const add = (severity: Severity, path: string, message: string) =>
    out.push({ path, line: lineOf(path), message, severity });

  checkModels(config, add);
  checkApiKeys(config, add);
  config.engines.forEach((e, i) => checkEngine(config, e, `engines[${i}]`, add));
  // A per-model SLO for a model nobody serves is a typo that silently routes without it.
  config.router.predicted.models.forEach((m, i) => {
    const names = config.models.map((x) => x.name);
    if (!names.includes(m.model)) add("warning", `router.predicted.models[${i}].model`, `unknown model ${JSON.stringify(m.model)}${didYouMean(m.model, names)}; its SLO never applies`);
  });
  checkPorts(config, add);
  checkGpus(config, add);
  checkCluster(config, add);
  checkFrontendTls(config, add);
  checkKvTier(config, add);
  checkPlanner(config, add);
  checkPd(config, add);

  const s = config.supervisor;
  if (s.restart_backoff_initial_ms > s.restart_backoff_max_ms)
    add("error", "supervisor.restart_backoff_initial_ms", `must not exceed restart_backoff_max_ms (${s.restart_backoff_max_ms})`);
  if (config.engines.length === 0) add("warning", "engines", "no engines configured: this node serves no model");
  return out;
}

type Add = (severity: Severity, path: string, message: string) => void;

const LOOPBACK = /^(127\.\d+\.\d+\.\d+|::1|localhost)$/;

/** The RESP server may listen beyond loopback only with AUTH; tier paths must not overlap. */
function checkKvTier(config: Config, add: Add): void {
  const t = config.kv_tier;
  const resp = t.resp && parseHostPort(t.resp.listen);
  if (t.resp && resp && !LOOPBACK.test(resp.host) && t.resp.password_file === "")
    add("error", "kv_tier.resp.password_file", `required when kv_tier.resp.listen (${t.resp.listen}) is not a loopback address`);
  if (t.resp && !t.cpu && !t.ssd) add("error", "kv_tier.resp", "needs kv_tier.cpu or kv_tier.ssd to store into");
  const paths: [string, string][] = [];
  if (t.cpu) paths.push(["kv_tier.cpu.path", t.cpu.path]);
  if (t.ssd) paths.push(["kv_tier.ssd.path", t.ssd.path]);
  t.shared_dirs.forEach((d, i) => paths.push([`kv_tier.shared_dirs[${i}].path`, d.path]));
  const norm = (p: string) => p.replace(/\/+$/, "") + "/";
  for (let i = 0; i < paths.length; i++)
    for (let j = 0; j < i; j++) {
      const [a, b] = [norm(paths[i]![1]), norm(paths[j]![1])];
      if (a.startsWith(b) || b.startsWith(a)) add("error", paths[i]![0], `overlaps ${paths[j]![0]} (${paths[j]![1]})`);
    }
}

// P/D (issue 13): a prefill engine needs a decode engine of the same model, here or on another
// cluster node (the P/D plan pairs workers across nodes), or nothing ever reads its KV. Whether herd
// sets the kind's P/D flags is the driver's `pdFlow` (src/engine/check.ts).
function checkPd(config: Config, add: Add): void {
  config.engines.forEach((e, i) => {
    if (e.role === "aggregated") return;
    if (e.role === "prefill" && !config.engines.some((d) => d.model === e.model && d.role === "decode")) {
      add("warning", `engines[${i}].role`, `no decode engine on this node serves ${JSON.stringify(e.model)}: prefill workers get no traffic until a decode worker of it exists here or on another cluster node`);
    }
  });
}

/** A tenant has exactly one of key / key_file, and a name no other tenant has. */
function checkApiKeys(config: Config, add: Add): void {
  const names = new Map<string, number>();
  config.frontend.api_keys.forEach((k, i) => {
    if (typeof k === "string") return;
    const p = `frontend.api_keys[${i}]`;
    if ((k.key === "") === (k.key_file === "")) add("error", `${p}.key`, "set exactly one of key and key_file");
    if (k.name === "") return;
    const prev = names.get(k.name);
    if (prev !== undefined) add("error", `${p}.name`, `duplicate tenant name ${JSON.stringify(k.name)} (also frontend.api_keys[${prev}])`);
    else names.set(k.name, i);
  });
}

function checkModels(config: Config, add: Add): void {
  const first = new Map<string, number>();
  config.models.forEach((m, i) => {
    const prev = first.get(m.name);
    if (prev !== undefined) add("error", `models[${i}].name`, `duplicate model name ${JSON.stringify(m.name)} (also models[${prev}])`);
    else first.set(m.name, i);
  });
  // A LoRA adapter or an alias is asked for by name like a model: its name must not stand for anything else.
  const owner = new Map<string, string>();
  config.models.forEach((m, i) =>
    m.aliases.forEach((a, j) => {
      const path = `models[${i}].aliases[${j}]`;
      if (first.has(a)) add("error", path, `${JSON.stringify(a)} is also a model name`);
      else if (owner.has(a)) add("error", path, `duplicate alias ${JSON.stringify(a)} (also ${owner.get(a)})`);
      else owner.set(a, path);
    }),
  );
  config.models.forEach((m, i) =>
    m.lora_adapters.forEach((a, j) => {
      const path = `models[${i}].lora_adapters[${j}].name`;
      if (first.has(a.name)) add("error", path, `${JSON.stringify(a.name)} is also a model name`);
      else if (owner.has(a.name)) add("error", path, `duplicate name ${JSON.stringify(a.name)} (also ${owner.get(a.name)})`);
      else owner.set(a.name, path);
    }),
  );
}

function checkEngine(config: Config, e: EngineConfig, p: string, add: Add): void {
  const names = config.models.map((m) => m.name);
  if (!names.includes(e.model)) {
    const known = names.length ? `defined models: ${names.join(", ")}` : "no models are defined (add a models: entry)";
    add("error", `${p}.model`, `unknown model ${JSON.stringify(e.model)}${didYouMean(e.model, names)}; ${known}`);
  }
  // Everything specific to a kind (external's url, command's argv, …) is checked by its engine
  // driver (src/engine/drivers/<kind>.ts `check`, run by `herd config check` and `herd run`).
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
  // Sharing one GPU between engines, and GPUs the host lacks, are checked against the host's GPUs
  // by engine/gpus.ts (`herd config check`, `herd run`).
  config.engines.forEach((e, i) => {
    const p = `engines[${i}].gpus`;
    if (e.gpus.length && e.gpus.length % e.count !== 0)
      add("error", p, `${e.gpus.length} GPUs cannot be split evenly across count ${e.count} engines`);
    const seen = new Set<number>();
    for (const g of e.gpus) {
      if (seen.has(g)) add("error", p, `GPU ${g} is listed twice`);
      seen.add(g);
    }
  });
}

function checkFrontendTls(config: Config, add: Add): void {
  const t = config.frontend.tls;
  if ((t.cert === "") !== (t.key === "")) add("error", t.cert === "" ? "frontend.tls.cert" : "frontend.tls.key", "set both frontend.tls.cert and frontend.tls.key, or neither");
  if (t.ca !== "" && t.cert === "") add("error", "frontend.tls.ca", "frontend.tls.ca (client certificates) needs frontend.tls.cert and key");
  // Other nodes call the peer API as plain HTTP unless cluster.tls is set (then it has its own listener).
  const c = config.cluster;
  if (t.cert !== "" && c.listen === "" && (c.discovery !== "file" || c.file.dir !== ""))
    add("error", "frontend.tls", "the peer API shares frontend.listen, and other nodes call it as plain HTTP: set cluster.listen (and cluster.tls) for the peer API");
}

function checkCluster(config: Config, add: Add): void {
  const c = config.cluster;
  if (c.token !== "" && c.token_file !== "") add("error", "cluster.token_file", "set either cluster.token or cluster.token_file, not both");
  const tlsSet = [c.tls.cert, c.tls.key, c.tls.ca].filter((f) => f !== "").length;
  if (tlsSet !== 0 && tlsSet !== 3) add("error", "cluster.tls", "set all of cluster.tls.cert, key and ca (mutual TLS), or none");
  if (tlsSet === 3 && c.listen === "") add("error", "cluster.listen", "cluster.tls needs its own peer listener: set cluster.listen (HOST:PORT), which other nodes' seeds name");
  if (c.discovery === "peers" && c.peers.seeds.length === 0)
    add("error", "cluster.peers.seeds", "discovery peers needs at least one seed (HOST:PORT of a voting member)");
  if (c.discovery === "peers" && c.peers.seeds.length % 2 === 0 && c.peers.seeds.length > 0)
    add("warning", "cluster.peers.seeds", `${c.peers.seeds.length} voters tolerate no more failures than ${c.peers.seeds.length - 1}; use an odd count`);
  if (new Set(c.peers.seeds).size !== c.peers.seeds.length) add("error", "cluster.peers.seeds", "duplicate seed");
  if (c.discovery === "etcd" && c.etcd.endpoints.length === 0) add("error", "cluster.etcd.endpoints", "discovery etcd needs at least one endpoint URL");
}
