// Secrets out of every CLI output (issue 22, row 12: `herd config check` and `herd run --dry-run`
// printed cluster.token, frontend.api_keys, frontend.admin_token and engine env such as HF_TOKEN in
// clear). Two layers: the config keys known to hold secrets (SECRET_PATHS, from schema.ts) and names
// that say "secret" (env variables and command-line flags: *TOKEN*, *KEY*, *SECRET*, *PASSWORD* …)
// are replaced where they are rendered; then `redact` replaces every such value wherever else it
// still appears in the text (an argv JSON blob, a finding), so one rendering path cannot leak it.
import type { Config } from "./types.ts";

export const REDACTED = "<redacted>";

/** Config keys whose value is a secret (schema.ts). `[]` = every element of a list. */
export const SECRET_PATHS = ["cluster.token", "frontend.admin_token", "frontend.api_keys[]", "frontend.api_keys[].key"] as const;

/** Name segments that mark a secret; a name ending in FILE/PATH/DIR names where one is, not the secret. */
const SECRET_WORDS = new Set(["TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASSPHRASE", "KEY", "APIKEY", "CREDENTIAL", "CREDENTIALS", "AUTH"]);
const LOCATION_WORDS = new Set(["FILE", "PATH", "DIR", "FILES", "NAME", "URL", "ID"]);

/** HF_TOKEN, AWS_SECRET_ACCESS_KEY, OPENAI_API_KEY, api-key, --password: yes. TOKENIZER, HF_TOKEN_PATH, --max-tokens: no. */
export function isSecretName(name: string): boolean {
  const words = name.replace(/^-+/, "").toUpperCase().split(/[^A-Z0-9]+/).filter((w) => w !== "");
  if (words.length === 0 || LOCATION_WORDS.has(words[words.length - 1]!)) return false;
  return words.some((w) => SECRET_WORDS.has(w));
}

/** A config path (as in findings: `frontend.api_keys[0]`, `engines[1].env.HF_TOKEN`) that holds a secret. */
export function isSecretPath(path: string): boolean {
  const general = path.replace(/\[\d+\]/g, "[]");
  if ((SECRET_PATHS as readonly string[]).some((p) => general === p || general === p.replace(/\[\]$/, ""))) return true;
  const env = /^engines\[\]\.env(?:\.([A-Za-z_][A-Za-z0-9_]*)|\["(.*)"\])$/.exec(general);
  return env !== null && isSecretName(env[1] ?? env[2] ?? "");
}

/**
 * A JSON object text (LMCache's LMCACHE_EXTRA_CONFIG `{"password": …}`, vLLM's --kv-transfer-config)
 * with the values of secret-named keys replaced, at any depth; any other text as is.
 */
export function redactJsonText(text: string): string {
  if (!text.startsWith("{")) return text;
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return text;
  }
  let changed = false;
  const walk = (v: unknown): unknown => {
    if (Array.isArray(v)) return v.map(walk);
    if (v === null || typeof v !== "object") return v;
    return Object.fromEntries(
      Object.entries(v).map(([k, x]) => {
        if (isSecretName(k) && (typeof x === "string" || typeof x === "number") && x !== "") {
          changed = true;
          return [k, REDACTED];
        }
        return [k, walk(x)];
      }),
    );
  };
  const out = walk(parsed);
  return changed ? JSON.stringify(out) : text;
}

/** Environment with secret-named values (and secrets inside JSON values) replaced. */
export function redactEnv(env: Readonly<Record<string, string>>): Record<string, string> {
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, isSecretName(k) && v !== "" ? REDACTED : redactJsonText(v)]));
}

/** argv with the value of a secret-named flag replaced: `--api-key X`, `--api-key=X`. */
export function redactArgv(argv: readonly string[]): string[] {
  const out: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const eq = a.indexOf("=");
    if (a.startsWith("-") && eq > 0 && isSecretName(a.slice(0, eq))) out.push(`${a.slice(0, eq)}=${REDACTED}`);
    else if (a.startsWith("-") && eq < 0 && isSecretName(a) && i + 1 < argv.length && !argv[i + 1]!.startsWith("-")) {
      out.push(a, REDACTED);
      i++;
    } else out.push(redactJsonText(a));
  }
  return out;
}

/** A copy of the config with every secret replaced (an empty value stays empty: "not set" is not a secret). */
export function redactConfig(config: Config): Config {
  const c = structuredClone(config);
  if (c.cluster.token !== "") c.cluster.token = REDACTED;
  if (c.frontend.admin_token !== "") c.frontend.admin_token = REDACTED;
  // A tenant entry keeps its name and limits (what an operator checks); only its key is hidden.
  c.frontend.api_keys = c.frontend.api_keys.map((k) => (typeof k === "string" ? REDACTED : { ...k, key: k.key === "" ? "" : REDACTED }));
  for (const e of c.engines) {
    e.env = redactEnv(e.env);
    e.args = redactArgv(e.args);
  }
  return c;
}

/** Every secret value the config holds (for `redact`). */
export function secretValues(config: Config): string[] {
  const out = [config.cluster.token, config.frontend.admin_token, ...config.frontend.api_keys.map((k) => (typeof k === "string" ? k : k.key))];
  for (const e of config.engines) {
    for (const [k, v] of Object.entries(e.env)) if (isSecretName(k)) out.push(v);
    const redacted = redactArgv(e.args);
    e.args.forEach((a, i) => {
      if (redacted[i] !== a) out.push(a.includes("=") && a.startsWith("-") ? a.slice(a.indexOf("=") + 1) : a);
    });
  }
  // very short values would blank out ordinary words; schema.ts requires nothing, so skip them here
  return [...new Set(out.filter((v) => v.length >= 4))].sort((a, b) => b.length - a.length);
}

/** `text` with every occurrence of each secret (and its JSON-escaped form) replaced. */
export function redact(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const s of secrets) {
    out = out.split(s).join(REDACTED);
    const escaped = JSON.stringify(s).slice(1, -1);
    if (escaped !== s) out = out.split(escaped).join(REDACTED);
  }
  return out;
}
