// Which config keys hold secrets, and whether a file's permission bits keep them secret. Pure over
// a mode (from stat), shared by `herd doctor` (src/ops/doctor-checks.ts) and `config check`.
// The rule follows the installer (docs/install.md): /etc/herd/herd.yaml is root:herd 0640, so a
// secret file may be read by its group (the `herd` service group) but not by others, and nobody
// but its owner may write it; OpenSSH refuses private keys readable by others on the same grounds.
import type { Config } from "./types.ts";

/** A file that holds a secret, and the config key naming it. */
export interface SecretFile {
  key: string;
  path: string;
}

/** Config keys whose file holds a secret (only those set). */
export function secretFilesOf(config: Pick<Config, "cluster" | "kv_tier">): SecretFile[] {
  const out: SecretFile[] = [];
  if (config.cluster.token_file !== "") out.push({ key: "cluster.token_file", path: config.cluster.token_file });
  const pw = config.kv_tier.resp?.password_file ?? "";
  if (pw !== "") out.push({ key: "kv_tier.resp.password_file", path: pw });
  return out;
}

/** Keys holding a secret inline in the config file (only those set). */
export function inlineSecretKeys(config: Pick<Config, "frontend" | "cluster">): string[] {
  const out: string[] = [];
  if (config.frontend.api_keys.length > 0) out.push("frontend.api_keys");
  if (config.frontend.admin_token !== "") out.push("frontend.admin_token");
  if (config.cluster.token !== "") out.push("cluster.token");
  return out;
}

const octal = (mode: number) => `0${(mode & 0o777).toString(8).padStart(3, "0")}`;

/** Why a secret file's mode is too open (group write, any bit for others), or null for 0600/0640/0400/0440. */
export function secretFileModeProblem(mode: number): string | null {
  if ((mode & 0o007) !== 0) return `mode ${octal(mode)} lets every user on the host read it`;
  if ((mode & 0o030) !== 0) return `mode ${octal(mode)} lets its group change it`;
  return null;
}

/** Why a config file holding inline secrets is too open (readable by others), or null. */
export function inlineSecretConfigProblem(mode: number): string | null {
  return (mode & 0o004) !== 0 ? `mode ${octal(mode)} lets every user on the host read the secrets in it` : null;
}

/** The chmod that fixes either problem, keeping the owner's bits and group read. */
export function secretModeFix(path: string): string {
  return `chmod 0640 ${path} (owner read/write, group read; e.g. chown root:herd)`;
}
