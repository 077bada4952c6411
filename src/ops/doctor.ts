// `herd doctor [FILE | --config FILE] [--json]`: the preflight a user runs on each host before
// `systemctl enable --now herd`, checking what otherwise fails minutes later (kubeadm's preflight,
// `consul validate` and `nomad node status` are the habit it follows): the config resolves; GPUs
// against engines' `gpus` and TP sizes; each engine kind installed, answering, at a checked version;
// the ports herd would plan; the KV tier against the host; secret files' permissions; cluster seeds
// or etcd answering, accepting the token and agreeing on model cards, and clock offsets.
// One line per check, `ok` / `warn` / `FAIL` with the fix in one sentence; exit 1 on any FAIL.
// The checks are functions over a DoctorProbe (doctor-probe.ts); this file is the shell.
import { driverFor } from "../engine/drivers/registry.ts";
import { errorMessage } from "../core/errors.ts";
import { checkConfigFiles, type FileFacts } from "../config/files.ts";
import { defaultConfig, loadConfigFile, renderFinding, type Config, type ConfigResult } from "../config/index.ts";
import { checkEngines } from "../engine/check.ts";
import { OpsUsageError, parseOpsArgs } from "./args.ts";
import { checkGpus, checkPorts, checkSecrets, checkTier, type CheckResult, type DoctorContext } from "./doctor-checks.ts";
import { checkCluster } from "./doctor-cluster.ts";
import { checkEngineKinds } from "./doctor-engines.ts";
import { systemProbe, type DoctorProbe } from "./doctor-probe.ts";
import { liveRuntime } from "./runtime.ts";

export const DOCTOR_USAGE = "herd doctor [FILE | --config FILE] [--json]";

export const DOCTOR_HELP = [
  "herd doctor: check this host before starting herd: config, GPUs, engines, ports, KV tier, secrets, cluster",
  "",
  `Usage: ${DOCTOR_USAGE}`,
  "",
  "One line per check: `ok`, `warn` or `FAIL`, with the fix in one sentence. Exit 1 when any check",
  "FAILs, 0 otherwise (warnings included), 2 on a usage error. Without a file: the embedded default.",
  "Checks: the config resolves (findings with path and line, as `config check`); GPUs found",
  "(nvidia-smi -L, /proc/driver/nvidia/gpus) against engines[].gpus and tensor-parallel flags; each",
  "engine kind installed and its version (vllm --version, sglang's __version__, trtllm-serve",
  "--version, a command's executable, an external URL's health path); fixed ports free and the range",
  "engine ports would be planned in; kv_tier against /dev/shm, the SSD path and the unit's MemoryMax;",
  "secret files present and not readable by others, a config holding secrets inline not",
  "world-readable; every cluster seed (or etcd endpoint) answering, accepting the token, agreeing on",
  "block size, tokenizer checksum and hash seed, and its clock offset.",
  "",
  "Options:",
  "  --config FILE    the config to check (same as FILE)",
  "  --json           {ok, counts, checks: [{check, status, message, fix}]} for scripts",
  "  -h, --help       this help",
].join("\n");

export interface DoctorIo {
  out(text: string): void;
  err(text: string): void;
}

/** The file checks of src/config/files.ts over the doctor's probe. */
function fileFactsOf(p: DoctorProbe): FileFacts {
  return {
    kind(path) {
      const st = p.stat(path);
      if (!st) return "missing";
      if (st.isDir) return "dir";
      return p.readText(path) === null ? "unreadable" : "file";
    },
    executable: (path) => p.which(path) !== null,
    pathEnv: p.env("PATH") ?? "",
  };
}

const FIX = {
  config: "correct the key the line names (herd config check shows the resolved config)",
  files: "create the file or directory, or correct the path the key names",
} as const;

function findingResults(result: Pick<ConfigResult, "findings" | "file">, check: "config" | "files" | "engines" = "config"): CheckResult[] {
  return result.findings.map((f) => ({
    check,
    status: f.severity === "error" ? "fail" : "warn",
    message: renderFinding(f, result.file ?? null).replace(/^warning: /, ""),
    fix: f.severity === "error" ? (check === "files" ? FIX.files : FIX.config) : "see the message; herd starts anyway",
  }));
}

/** Every check, in order. Stops after the config when it does not resolve (nothing else is known). */
export async function runDoctor(configPath: string | null, probe: DoctorProbe, load: (path: string) => Promise<ConfigResult> = loadConfigFile): Promise<CheckResult[]> {
  const loaded: ConfigResult = configPath === null ? { config: defaultConfig(), findings: [] } : await load(configPath);
  const out = findingResults(loaded);
  const config: Config | undefined = loaded.config;
  if (!config) return out;
  out.push({ check: "config", status: "ok", message: `${configPath ?? "embedded default"} resolves: ${config.models.length} model(s), ${config.engines.length} engine entr${config.engines.length === 1 ? "y" : "ies"}` });
  const files = checkConfigFiles(config, configPath, (kind) => driverFor(kind).loadsModelPath, fileFactsOf(probe));
  out.push(...findingResults({ findings: files, file: configPath ?? undefined }, "files"));
  const live = liveRuntime(config.node.data_dir);
  const ctx: DoctorContext = { config, configPath, probe, running: live ? { pid: live.pid, url: live.url } : null };
  const gpus = await checkGpus(ctx);
  out.push(...gpus.results);
  // The drivers' own rules (kind-specific keys, hash algorithms); GPU findings are the gpus lines above.
  const engineFindings = checkEngines(config, gpus.host, loaded.lineOf).filter((f) => !f.path.endsWith(".gpus"));
  out.push(...findingResults({ findings: engineFindings, file: configPath ?? undefined }, "engines"));
  // A `command` executable the file check already names is not reported twice.
  const named = new Set(files.map((f) => f.path.replace(/\.command$/, "")));
  out.push(...(await checkEngineKinds(config, probe)).filter((r) => !(r.status === "fail" && named.has(r.check))));
  out.push(...checkPorts(ctx, gpus.host));
  out.push(...(await checkTier(ctx)));
  out.push(...checkSecrets(ctx));
  out.push(...(await checkCluster(config, probe)));
  return out;
}

const LABEL = { ok: "ok  ", warn: "warn", fail: "FAIL" } as const;

export function renderDoctor(results: readonly CheckResult[]): string {
  const lines = results.map((r) => `${LABEL[r.status]}  ${r.check}: ${r.message}${r.fix ? ` — fix: ${r.fix}` : ""}`);
  const n = (s: CheckResult["status"]) => results.filter((r) => r.status === s).length;
  lines.push(`${n("fail") > 0 ? "FAIL" : "ok"}: ${n("ok")} ok, ${n("warn")} warnings, ${n("fail")} failed`);
  return lines.join("\n");
}

export function doctorJson(results: readonly CheckResult[]): string {
  const counts = { ok: 0, warn: 0, fail: 0 };
  for (const r of results) counts[r.status]++;
  return JSON.stringify({ ok: counts.fail === 0, counts, checks: results }, null, 2);
}

export async function doctorMain(argv: readonly string[], io: DoctorIo, probe: DoctorProbe = systemProbe()): Promise<number> {
  try {
    const a = parseOpsArgs(argv, { values: ["config"], bools: ["json"], maxPositionals: 1 });
    if (a.help) {
      io.out(DOCTOR_HELP);
      return 0;
    }
    if (a.values.config !== undefined && a.positionals.length > 0) throw new OpsUsageError("give the config as FILE or --config FILE, not both");
    const path = a.values.config ?? a.positionals[0] ?? null;
    const results = await runDoctor(path, probe);
    io.out(a.bools.has("json") ? doctorJson(results) : renderDoctor(results));
    return results.some((r) => r.status === "fail") ? 1 : 0;
  } catch (e) {
    if (e instanceof OpsUsageError) {
      io.err(`herd doctor: ${e.message}\nUsage: ${DOCTOR_USAGE}\nRun \`herd doctor --help\` for details.`);
      return 2;
    }
    io.err(`herd doctor: ${errorMessage(e)}`);
    return 1;
  }
}
