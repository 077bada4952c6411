// Permission warnings for files that hold secrets (issue 22, row 13: a 0644 token file, or a config
// holding cluster.token inline at 0644, drew no warning anywhere). A secret file readable or
// writable by every user, or writable by its group, is a warning with the key path and line, shown
// by `herd config check` and by `herd run` before it starts. Group read stays allowed: 0640 with a
// dedicated group (root:herd) is how systemd deployments share a secret with a service user (OpenSSH
// refuses group-readable private keys, but those belong to one user, not to a service group).
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

/** Config keys holding a secret inline, in the order a finding names the first of them. */
function inlineSecretKeys(config: Config): string[] {
  const keys: string[] = [];
  if (config.cluster.token !== "") keys.push("cluster.token");
  if (config.frontend.api_keys.length > 0) keys.push("frontend.api_keys");
  if (config.frontend.admin_token !== "") keys.push("frontend.admin_token");
  config.engines.forEach((e, i) => {
    for (const [k, v] of Object.entries(e.env)) if (v !== "" && isSecretName(k)) keys.push(`engines[${i}].env.${k}`);
  });
  return keys;
}

const octal = (mode: number) => `0${(mode & 0o777).toString(8).padStart(3, "0")}`;

function who(mode: number): string {
  if (mode & 0o004) return "readable by every user";
  if (mode & 0o002) return "writable by every user";
  if (mode & 0o020) return "writable by its group";
  return "open to other users";
}

/**
 * One warning per secret file whose mode is unsafe: cluster.token_file, cluster.tls.key, kv_tier.resp.password_file,
 * and the config file itself when it holds a secret inline. `lineOf` maps a key path to its line.
 */
export function secretFileFindings(config: Config, configFile: string | null, lineOf: (path: string) => number = () => 0, modeOf: ModeOf = realModeOf): Finding[] {
  const out: Finding[] = [];
  const check = (path: string, file: string, what: string, fix: string) => {
    const mode = modeOf(file);
    if (mode === null || (mode & UNSAFE_MODE_BITS) === 0) return;
    out.push({ path, line: lineOf(path), severity: "warning", message: `${what} ${file} is ${who(mode)} (mode ${octal(mode)}); ${fix}` });
  };
  const fix = (file: string) => `chmod 600 ${file} (or 640 with a group only herd's user is in)`;
  if (config.cluster.token_file !== "") check("cluster.token_file", config.cluster.token_file, "token file", fix(config.cluster.token_file));
  if (config.cluster.tls.key !== "") check("cluster.tls.key", config.cluster.tls.key, "TLS private key", fix(config.cluster.tls.key));
  const pw = config.kv_tier.resp?.password_file ?? "";
  if (pw !== "") check("kv_tier.resp.password_file", pw, "password file", fix(pw));
  const inline = inlineSecretKeys(config);
  if (configFile !== null && inline.length > 0)
    check(inline[0]!, configFile, `the config holds ${inline.join(", ")} inline, and`, `${fix(configFile)}${inline.includes("cluster.token") ? ", or move cluster.token to cluster.token_file" : ""}`);
  return out;
}
