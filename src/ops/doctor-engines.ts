// `herd doctor`: is each configured engine kind installed, does it answer, and is its version one
// herd's launch flags were checked against (docs/references.md#timing-A.6)? One result per kind
// (per entry for `command` and `external`, whose executables and URLs differ).
import { driverFor } from "../engine/drivers/registry.ts";
import type { Config, EngineConfig } from "../config/types.ts";
import type { CheckResult } from "./doctor-checks.ts";
import type { DoctorProbe } from "./doctor-probe.ts";

/**
 * Versions the drivers' flags were read at (docs/references.md#timing-A.6): below `min` a flag herd
 * always passes is refused; above `checked` it has not been compared.
 */
export const CHECKED_VERSIONS: Record<"vllm" | "sglang" | "trtllm", { min: string | null; checked: string | null; ask: string[] }> = {
  vllm: { min: "0.18.0", checked: "0.26", ask: ["vllm", "--version"] },
  sglang: { min: null, checked: null, ask: ["python3", "-c", "import sglang; print(sglang.__version__)"] },
  trtllm: { min: null, checked: "1.4", ask: ["trtllm-serve", "--version"] },
};

/** The first version number in a tool's output (`0.11.0`, `v1.4.0rc4`, `trtllm-serve 1.2.0`). */
export function parseVersion(text: string): string | null {
  return /\bv?(\d+\.\d+(?:\.\d+)?(?:[.+-]?[A-Za-z0-9.]+)?)\b/.exec(text)?.[1] ?? null;
}

/** Compare the numeric parts of two versions (pre-release suffixes ignored): -1, 0, 1. */
export function compareVersions(a: string, b: string): number {
  const nums = (v: string) => v.split(/[.+-]/).map((p) => Number.parseInt(p, 10)).filter((n) => Number.isFinite(n));
  const x = nums(a);
  const y = nums(b);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d < 0 ? -1 : 1;
  }
  return 0;
}

/** Whether `v` is within the checked line `checked` (e.g. 0.26.1 within "0.26"). */
function withinChecked(v: string, checked: string): boolean {
  const depth = checked.split(".").length;
  return compareVersions(v.split(/[.+-]/).slice(0, depth).join("."), checked) <= 0;
}

const INSTALL_FIX: Record<string, string> = {
  vllm: "install vLLM in the environment herd runs in (pip install vllm), so `vllm` is on herd's PATH",
  sglang: "install SGLang for the python3 herd runs (pip install \"sglang[all]\")",
  trtllm: "install TensorRT-LLM (pip install tensorrt_llm), so `trtllm-serve` is on herd's PATH",
};

export async function checkEngineKinds(config: Config, probe: DoctorProbe): Promise<CheckResult[]> {
  const out: CheckResult[] = [];
  const kinds = new Set(config.engines.map((e) => e.kind));
  for (const kind of ["vllm", "sglang", "trtllm"] as const) {
    if (!kinds.has(kind)) continue;
    out.push(await checkKind(kind, probe));
  }
  for (const [i, e] of config.engines.entries()) {
    // Capabilities, not kind names (test/architecture.test.ts): only kind `command` sets `command`,
    // and an unmanaged engine is one herd reaches at its `url` instead of starting it.
    if (e.command.length > 0) out.push(checkCommand(e, i, probe));
    if (!driverFor(e.kind).managed) out.push(await checkExternal(e, i, probe));
  }
  if (kinds.has("sim")) out.push({ check: "engine sim", status: "ok", message: "built into herd (herd sim-engine)" });
  return out;
}

async function checkKind(kind: "vllm" | "sglang" | "trtllm", probe: DoctorProbe): Promise<CheckResult> {
  const v = CHECKED_VERSIONS[kind];
  const check = `engine ${kind}`;
  const cmd = v.ask.map((a) => (a.includes(" ") ? `'${a}'` : a)).join(" ");
  const r = await probe.run(v.ask, 60_000);
  if (r === null) return { check, status: "fail", message: `${v.ask[0]} not found on PATH`, fix: INSTALL_FIX[kind]! };
  if (r.code !== 0) {
    const why = (r.err.trim().split("\n").pop() ?? "").slice(0, 200) || `exit ${r.code ?? "by signal"}`;
    return { check, status: "fail", message: `\`${cmd}\` failed: ${why}`, fix: INSTALL_FIX[kind]! };
  }
  const version = parseVersion(r.out) ?? parseVersion(r.err);
  if (version === null) return { check, status: "warn", message: `\`${cmd}\` answered, but with no version number`, fix: "check that the installed package is the engine herd expects" };
  const ref = "docs/references.md#timing-A.6";
  if (v.min !== null && compareVersions(version, v.min) < 0)
    return { check, status: "fail", message: `${kind} ${version} is older than ${v.min}, which herd's launch flags need (${ref})`, fix: `upgrade ${kind} to ${v.min} or later` };
  if (v.checked === null) return { check, status: "warn", message: `${kind} ${version} answers; herd's flags were read from its source without a release number (${ref})`, fix: `run one engine with \`herd run --dry-run\`'s command line by hand once before relying on it` };
  if (!withinChecked(version, v.checked))
    return { check, status: "warn", message: `${kind} ${version} is newer than ${v.checked}, the last version herd's flags were checked against (${ref})`, fix: "check `herd run --dry-run`'s command line against this version's --help, or pin the checked version" };
  return { check, status: "ok", message: `${kind} ${version} (flags checked for ${v.min ? `${v.min}-` : "up to "}${v.checked})` };
}

function checkCommand(e: EngineConfig, i: number, probe: DoctorProbe): CheckResult {
  const check = `engines[${i}]`;
  const exe = e.command[0] ?? "";
  const found = probe.which(exe);
  if (found === null) return { check, status: "fail", message: `command ${JSON.stringify(exe)} is not an executable on PATH`, fix: `install it, or give engines[${i}].command[0] as an absolute path` };
  return { check, status: "ok", message: `command ${exe} → ${found}` };
}

async function checkExternal(e: EngineConfig, i: number, probe: DoctorProbe): Promise<CheckResult> {
  const check = `engines[${i}]`;
  const url = e.url.replace(/\/+$/, "") + e.health_path;
  try {
    const r = await probe.http(url, { timeoutMs: 5_000 });
    if (r.status === 200) return { check, status: "ok", message: `external engine answers: GET ${url} → 200` };
    return { check, status: "warn", message: `external engine GET ${url} → HTTP ${r.status}`, fix: "start it (herd routes to it once its health path answers 200)" };
  } catch (err) {
    return { check, status: "warn", message: `external engine ${url} does not answer: ${(err as Error).message}`, fix: `start it, or correct engines[${i}].url` };
  }
}
