// Which config keys hold secrets, and whether a file's permission bits keep them secret (issue 22,
// row 13: a 0644 token file, or a config holding cluster.token inline at 0644, drew no warning).
// One rule, used by `herd config check`, `herd run` before it starts, and `herd doctor`
// (src/ops/doctor-checks.ts): nobody but the owner may write a secret file and others may not read
// it; group read stays allowed, because 0640 with a dedicated group (root:herd, docs/install.md) is
// how systemd deployments share a secret with a service user. OpenSSH refuses private keys readable
// by others on the same grounds.
import { statSync } from "node:fs";
import type { Finding } from "./findings.ts";
import { isSecretName } from "./redact.ts";
import type { Config } from "./types.ts";

/** Mode bits that make a secret file unsafe: group write, and anything for others. */
export const UNSAFE_MODE_BITS = 0o027;

/** What the check needs from the file system; tests inject fakes. null = missing or unreadable (reported elsewhere). */
export type ModeOf = (path: string) => number | null;

export const realModeOf: ModeOf = (path) => {
  try {
    const st = statSync(path);
    return st.isFile() ? st.mode & 0o7777 : null;
  } catch {
    return null;
  }
};

/** A file that holds a secret, and the config key naming it. */
export interface SecretFile {
  key: string;
  path: string;
  /** How a message names it: "token file", "TLS private key", "password file". */
  what: string;
}

/** Config keys whose file holds a secret (only those set). */
export function secretFilesOf(config: Pick<Config, "cluster" | "kv_tier" | "frontend">): SecretFile[] {
  const out: SecretFile[] = [];
  if (config.cluster.token_file !== "") out.push({ key: "cluster.token_file", path: config.cluster.token_file, what: "token file" });
  if (config.cluster.tls.key !== "") out.push({ key: "cluster.tls.key", path: config.cluster.tls.key, what: "TLS private key" });
  if (config.frontend.tls.key !== "") out.push({ key: "frontend.tls.key", path: config.frontend.tls.key, what: "TLS private key" });
  const pw = config.kv_tier.resp?.password_file ?? "";
  if (pw !== "") out.push({ key: "kv_tier.resp.password_file", path: pw, what: "password file" });
  config.frontend.api_keys.forEach((k, i) => {
    if (typeof k !== "string" && k.key_file !== "") out.push({ key: `frontend.api_keys[${i}].key_file`, path: k.key_file, what: "API key file" });
  });
  return out;
}

/** Config keys holding a secret inline in the config file, in the order a finding names the first of them. */
export function inlineSecretKeys(config: Pick<Config, "frontend" | "cluster" | "engines">): string[] {
  const keys: string[] = [];
  if (config.cluster.token !== "") keys.push("cluster.token");
  if (config.frontend.api_keys.some((k) => typeof k === "string" || k.key !== "")) keys.push("frontend.api_keys");
  if (config.frontend.admin_token !== "") keys.push("frontend.admin_token");
  config.engines.forEach((e, i) => {
    for (const [k, v] of Object.entries(e.env)) if (v !== "" && isSecretName(k)) keys.push(`engines[${i}].env.${k}`);
  });
  return keys;
}

const octal = (mode: number) => `0${(mode & 0o777).toString(8).padStart(3, "0")}`;

/** Why a file holding a secret has an unsafe mode, or null (0600, 0640, 0400, 0440 are fine). */
export function secretFileModeProblem(mode: number): string | null {
  if ((mode & UNSAFE_MODE_BITS) === 0) return null;
  if (mode & 0o004) return `mode ${octal(mode)} lets every user on the host read it`;
  if (mode & 0o002) return `mode ${octal(mode)} lets every user on the host change it`;
  if (mode & 0o020) return `mode ${octal(mode)} lets its group change it`;
  return `mode ${octal(mode)} opens it to other users`;
}

/** The chmod that fixes it, keeping the owner's bits and group read. */
export function secretModeFix(path: string): string {
  return `chmod 0640 ${path} (owner read/write, group read; e.g. chown root:herd)`;
}

/**
 * One warning per secret file whose mode is unsafe, and for the config file itself when it holds a
 * secret inline. `lineOf` maps a key path to its line in the config.
 */
export function secretFileFindings(config: Config, configFile: string | null, lineOf: (path: string) => number = () => 0, modeOf: ModeOf = realModeOf): Finding[] {
  const out: Finding[] = [];
  const check = (path: string, file: string, what: string, extraFix = "") => {
    const mode = modeOf(file);
    const bad = mode === null ? null : secretFileModeProblem(mode);
    if (bad) out.push({ path, line: lineOf(path), severity: "warning", message: `${what} ${file}: ${bad}; ${secretModeFix(file)}${extraFix}` });
  };
  for (const f of secretFilesOf(config)) check(f.key, f.path, f.what);
  const inline = inlineSecretKeys(config);
  if (configFile !== null && inline.length > 0)
    check(inline[0]!, configFile, `the config holds ${inline.join(", ")} inline, and`, inline.includes("cluster.token") ? ", or move cluster.token to cluster.token_file" : "");
  return out;
}
