// `herd doctor`'s host checks: GPUs against the engines' `gpus` and tensor-parallel sizes, the ports
// herd would plan, the KV tier against /dev/shm, the SSD and the memory limit, and secret files'
// permissions. Each check is a function of the resolved config and a DoctorProbe (doctor-probe.ts)
// returning result lines; nothing here touches the host directly.
import type { Config, EngineConfig } from "../config/types.ts";
import { parseHostPort, parseSize } from "../config/checks.ts";
import { inlineSecretKeys, secretFileModeProblem, secretFilesOf, secretModeFix } from "../config/secret-perms.ts";
import { lastFlag } from "../engine/drivers/common.ts";
import { driverFor } from "../engine/drivers/registry.ts";
import { assignGpus, detectGpus, type HostGpus } from "../engine/gpus.ts";
import { planEngines } from "../engine/plan.ts";
import { portsOfPlan } from "../pd/ports.ts";
import { sizingProblems, type SizingRequest } from "../tier/sizing.ts";
import { gpuProbeOf, type DoctorProbe } from "./doctor-probe.ts";

export type CheckStatus = "ok" | "warn" | "fail";

export interface CheckResult {
  /** Which check: config, gpus, engine[i], ports, kv_tier, secrets, cluster … */
  check: string;
  status: CheckStatus;
  message: string;
  /** One sentence: what to do (warn and fail only). */
  fix?: string;
}

export interface DoctorContext {
  config: Config;
  /** The config file, or null for the embedded default. */
  configPath: string | null;
  probe: DoctorProbe;
  /** A herd already running on this data dir (its runtime file): it holds the ports it planned. */
  running: { pid: number; url: string | null } | null;
}

const ok = (check: string, message: string): CheckResult => ({ check, status: "ok", message });
const warn = (check: string, message: string, fix: string): CheckResult => ({ check, status: "warn", message, fix });
const fail = (check: string, message: string, fix: string): CheckResult => ({ check, status: "fail", message, fix });

/** The tensor-parallel size an entry's own args ask for (each kind's flag), or undefined. */
export function tpFromArgs(e: EngineConfig): number | undefined {
  const flags = { vllm: ["--tensor-parallel-size", "-tp"], sglang: ["--tp-size", "--tp"], trtllm: ["--tp_size"] }[e.kind as "vllm" | "sglang" | "trtllm"];
  for (const f of flags ?? []) {
    const v = lastFlag(e.args, f);
    if (v !== undefined && /^\d+$/.test(v)) return Number(v);
  }
  return undefined;
}

export async function checkGpus(ctx: DoctorContext): Promise<{ results: CheckResult[]; host: HostGpus }> {
  const { config } = ctx;
  const host = detectGpus(await gpuProbeOf(ctx.probe));
  const out: CheckResult[] = [];
  const gpuEntries = config.engines.map((e, i) => ({ e, i })).filter(({ e }) => driverFor(e.kind).usesGpus);
  if (gpuEntries.length === 0) out.push(ok("gpus", `${host.ids.length} GPU${host.ids.length === 1 ? "" : "s"} found (${host.source}); no engine needs one`));
  else if (host.ids.length === 0)
    out.push(fail("gpus", `no GPU found (nvidia-smi -L and /proc/driver/nvidia/gpus answer nothing), but ${gpuEntries.map(({ e, i }) => `engines[${i}] (${e.kind})`).join(", ")} need GPUs`, "install the NVIDIA driver (nvidia-smi -L must list the GPUs) or run this config on a GPU host"));
  else out.push(ok("gpus", `${host.ids.length} GPU${host.ids.length === 1 ? "" : "s"} found (${host.source}): ${host.ids.join(",")}`));
  const plan = assignGpus(config, host);
  for (const issue of plan.issues) {
    if (host.ids.length === 0 && issue.severity === "warning") continue; // said above
    const r = issue.severity === "error" ? fail : warn;
    out.push(r("gpus", `${issue.path}: ${issue.message}`, "give each engine its own GPUs in engines[].gpus (count must divide them), or set share_gpu: true"));
  }
  for (const { e, i } of gpuEntries) {
    const tp = tpFromArgs(e);
    const share = plan.byEntry[i]?.[0]?.length ?? 0;
    if (tp !== undefined && share > 0 && tp !== share)
      out.push(fail(`engines[${i}]`, `args ask for tensor parallel size ${tp} but each of its ${e.count} engine(s) gets ${share} GPU${share === 1 ? "" : "s"}`, `list ${tp * e.count} GPUs in engines[${i}].gpus (or drop the TP flag: herd passes the GPU count as the TP size)`));
  }
  return { results: out, host };
}

/**
 * The ports `herd run` would plan now (the planner's own code, probing by binding), and the fixed
 * ones: the frontend listener, `port:` entries, explicit KV event endpoints, the RESP server. A fixed
 * port something already binds is a FAIL; planned ones skip taken ports by construction, so they
 * are listed as the range they fall in.
 */
export function checkPorts(ctx: DoctorContext, host: HostGpus): CheckResult[] {
  const { config, probe, running } = ctx;
  if (running) {
    return [ok("ports", `herd (pid ${running.pid}${running.url ? `, ${running.url}` : ""}) is running on this data dir and holds its ports; not probed`)];
  }
  const out: CheckResult[] = [];
  const fixed: { what: string; host: string; port: number }[] = [];
  const listen = parseHostPort(config.frontend.listen);
  if (listen && listen.port > 0) fixed.push({ what: "frontend.listen", host: listen.host, port: listen.port });
  config.engines.forEach((e, i) => {
    if (driverFor(e.kind).managed && e.port > 0) for (let k = 0; k < e.count; k++) fixed.push({ what: `engines[${i}].port`, host: e.host, port: e.port + k });
    for (const ep of [e.kv_events?.endpoint, e.kv_events?.replay_endpoint]) {
      const m = ep && driverFor(e.kind).managed ? /:(\d+)$/.exec(ep) : null;
      if (m) fixed.push({ what: `engines[${i}].kv_events`, host: "0.0.0.0", port: Number(m[1]) });
    }
  });
  const resp = config.kv_tier.resp ? parseHostPort(config.kv_tier.resp.listen) : null;
  if (resp && resp.port > 0) fixed.push({ what: "kv_tier.resp.listen", host: resp.host, port: resp.port });
  for (const f of fixed) {
    if (!probe.portFree(f.host, f.port)) out.push(fail("ports", `${f.what}: ${f.host}:${f.port} is already in use`, `stop what holds it (ss -ltnp 'sport = :${f.port}') or choose another port in ${f.what}`));
  }
  let planned: number[] = [];
  const herds = new Set<number>();
  try {
    const fixedPorts = new Set(fixed.map((f) => f.port));
    const leasedFree = (p: number) => {
      const pid = probe.portLeasedBy(p);
      if (pid !== null) herds.add(pid);
      return pid === null;
    };
    const plans = planEngines(config, { self: ["herd"], hostGpus: host, isPortFree: (h, p) => !fixedPorts.has(p) && leasedFree(p) && probe.portFree(h, p) });
    planned = plans.filter((p) => p.spec !== null && config.engines[p.entryIndex]!.port === 0).flatMap(portsOfPlan);
  } catch (e) {
    out.push(fail("ports", `the engine plan fails: ${(e as Error).message}`, "fix the engines[] entry it names"));
    return out;
  }
  if (planned.length > 0) {
    const lo = Math.min(...planned);
    const hi = Math.max(...planned);
    const skipped = hi - lo + 1 - planned.length;
    out.push(ok("ports", `${planned.length} engine port${planned.length === 1 ? "" : "s"} would be planned ${lo === hi ? `at ${lo}` : `in ${lo}-${hi}`} (supervisor.port_range_start ${config.supervisor.port_range_start}${skipped > 0 ? `; ${skipped} taken ones skipped` : ""}${herds.size > 0 ? `; other herds on this host lease ports: pid ${[...herds].join(", ")}` : ""})`));
  }
  if (fixed.length > 0 && !out.some((r) => r.status === "fail")) out.push(ok("ports", `fixed ports free: ${fixed.map((f) => `${f.port} (${f.what})`).join(", ")}`));
  return out;
}

/** The KV tier against the host: tmpfs and SSD free space, the memory limit (tier/sizing.ts rules). */
export async function checkTier(ctx: DoctorContext): Promise<CheckResult[]> {
  const { config, probe } = ctx;
  const t = config.kv_tier;
  if (!t.cpu && !t.ssd) return [ok("kv_tier", "no CPU or SSD tier configured")];
  const req: SizingRequest = {};
  if (t.cpu) Object.assign(req, { cpuBytes: parseSize(t.cpu.size) ?? 0, cpuPath: t.cpu.path });
  if (t.ssd) Object.assign(req, { ssdBytes: parseSize(t.ssd.size) ?? 0, ssdPath: t.ssd.path });
  const facts = probe.tierFacts(req);
  // Run as a user, doctor's own cgroup is not the service's: ask systemd for the unit's MemoryMax.
  const unit = await probe.run(["systemctl", "show", "-p", "MemoryMax", "--value", "herd"], 5_000);
  const unitMax = unit && unit.code === 0 ? Number(unit.out.trim()) : NaN;
  if (Number.isFinite(unitMax) && unitMax > 0 && unitMax < 2 ** 62) facts.memoryMaxBytes = unitMax;
  const problems = sizingProblems(req, facts);
  if (problems.length > 0) return problems.map((p) => fail("kv_tier", p.replace(/\s*(Lower|Raise).*$/, ""), /(Lower|Raise).*$/.exec(p)?.[0] ?? "lower the size"));
  const parts: string[] = [];
  if (t.cpu) parts.push(`cpu ${t.cpu.size} fits ${t.cpu.path}`);
  if (t.ssd) parts.push(`ssd ${t.ssd.size} fits ${t.ssd.path}`);
  if (t.cpu && facts.memoryMaxBytes !== undefined) parts.push("and the memory limit");
  return [ok("kv_tier", parts.join(", "))];
}

/** Secret files exist, are not empty and not readable by others; a config with inline secrets is not world-readable. */
export function checkSecrets(ctx: DoctorContext): CheckResult[] {
  const { config, configPath, probe } = ctx;
  const out: CheckResult[] = [];
  for (const f of secretFilesOf(config)) {
    const st = probe.stat(f.path);
    if (!st || st.isDir) {
      out.push(fail("secrets", `${f.key}: ${f.path} ${st ? "is a directory" : "does not exist"}`, `create it with the secret on its first line, mode 0640 (or point ${f.key} elsewhere)`));
      continue;
    }
    const text = probe.readText(f.path);
    if (text === null) out.push(fail("secrets", `${f.key}: ${f.path} cannot be read by this user`, "run doctor as the user herd runs as (or root), and give that user read access"));
    else if ((text.split("\n")[0] ?? "").trim() === "") out.push(fail("secrets", `${f.key}: ${f.path} is empty`, "put the secret on its first line"));
    const bad = secretFileModeProblem(st.mode);
    if (bad) out.push(fail("secrets", `${f.key}: ${f.path}: ${bad}`, secretModeFix(f.path)));
  }
  const inline = inlineSecretKeys(config);
  if (inline.length > 0 && configPath !== null) {
    const st = probe.stat(configPath);
    const bad = st ? secretFileModeProblem(st.mode) : null;
    if (bad) out.push(fail("secrets", `${configPath} holds ${inline.join(", ")} inline and its ${bad}`, `${secretModeFix(configPath)}, or move the secrets to files (cluster.token_file)`));
  }
  if (out.length === 0) {
    const n = secretFilesOf(config).length;
    out.push(ok("secrets", n + inline.length === 0 ? "no secrets configured" : `${n} secret file${n === 1 ? "" : "s"} present and private${inline.length ? `; inline ${inline.join(", ")} in a file others cannot read` : ""}`));
  }
  return out;
}
