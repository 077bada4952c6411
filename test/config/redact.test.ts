// Issue 22, row 12: `herd config check` and `herd run --dry-run` printed cluster.token,
// frontend.api_keys, frontend.admin_token and engine secrets (HF_TOKEN, --api-key) in clear.
import { afterAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main, type Entrypoints } from "../../src/cli.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { REDACTED, SECRET_PATHS, isSecretName, isSecretPath, redact, redactArgv, redactEnv, secretValues } from "../../src/config/redact.ts";

const dir = mkdtempSync(join(tmpdir(), "herd-redact-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const SECRETS = ["clusterS3cretTok", "sk-apikey-one-111", "sk-apikey-two-222", "adm1nT0kenValue", "hf_SECRETVALUE123", "vllmApiKeyXYZ", "inlineKey=with'quote"];
const yaml = `
frontend:
  listen: 127.0.0.1:8123
  api_keys: ["${SECRETS[1]}", "${SECRETS[2]}"]
  admin_token: ${SECRETS[3]}
cluster:
  token: ${SECRETS[0]}
models:
  - name: m
engines:
  - kind: sim
    model: m
    env: { HF_TOKEN: ${SECRETS[4]}, HF_HOME: /tmp/hf, AWS_SECRET_ACCESS_KEY: "${SECRETS[6]}" }
    args: ["--api-key", "${SECRETS[5]}", "--time-scale=1"]
`;

async function herd(...argv: string[]) {
  const r = { code: -1, out: "", err: "" };
  const entry: Entrypoints = { runDaemon: async () => 9, simEngineMain: async () => 0 };
  r.code = await main(argv, { out: (t) => void (r.out += t + "\n"), err: (t) => void (r.err += t + "\n") }, entry);
  return r;
}

describe("no CLI output shows a secret", () => {
  test("config check: every secret is <redacted>, the rest of the config is shown", async () => {
    const f = join(dir, "secrets.yaml");
    writeFileSync(f, yaml);
    const r = await herd("config", "check", f);
    expect(r.code).toBe(0);
    for (const s of SECRETS) {
      expect(r.out).not.toContain(s);
      expect(r.err).not.toContain(s);
    }
    expect(r.out).toContain(`token: ${REDACTED}`);
    expect(r.out).toContain(`admin_token: ${REDACTED}`);
    expect(r.out).toContain(`HF_TOKEN: ${REDACTED}`);
    expect(r.out).toContain("HF_HOME: /tmp/hf");
    expect(r.out).toContain("--time-scale=1");
  });

  test("run --dry-run: engine env and argv secrets are <redacted>", async () => {
    const f = join(dir, "dry.yaml");
    writeFileSync(f, yaml, { mode: 0o600 }); // not readable by others: no permission warning here
    const r = await herd("run", "--dry-run", "--config", f);
    expect(r.err).toBe("");
    expect(r.code).toBe(0);
    for (const s of SECRETS) expect(r.out + r.err).not.toContain(s);
    expect(r.out).toContain(`HF_TOKEN=${shq(REDACTED)}`);
    expect(r.out).toContain(`--api-key ${shq(REDACTED)}`);
    expect(r.out).toContain("HF_HOME=/tmp/hf");
  });

  test("a finding about a secret key does not quote its value", async () => {
    const f = join(dir, "bad.yaml");
    writeFileSync(f, "cluster:\n  token: 123456789\nengines:\n  - kind: sim\n    model: m\n    env: { HF_TOKEN: [987654321] }\n");
    const r = await herd("config", "check", f);
    expect(r.code).toBe(1);
    expect(r.err).toContain("cluster.token: expected a string");
    expect(r.err).not.toContain("123456789");
    expect(r.err).not.toContain("987654321");
  });
});

const shq = (s: string) => `'${s}'`;

describe("the redaction rules", () => {
  test("names: secrets yes, their locations and look-alikes no", () => {
    for (const n of ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "--api-key", "--password", "--hf-token", "GITHUB_AUTH"]) expect({ n, secret: isSecretName(n) }).toEqual({ n, secret: true });
    for (const n of ["TOKENIZER", "--tokenizer", "HF_TOKEN_PATH", "--kv-offload-password-file", "--max-tokens", "CUDA_VISIBLE_DEVICES", "HF_HOME", "KEY_FILE"]) expect({ n, secret: isSecretName(n) }).toEqual({ n, secret: false });
  });

  test("paths: the schema's secret keys (each exists in the config) and secret-named engine env", () => {
    const c = defaultConfig() as unknown as Record<string, Record<string, unknown>>;
    for (const p of SECRET_PATHS) {
      const [a, b] = p.replace("[]", "").split(".");
      expect(c[a!]![b!]).toBeDefined();
    }
    expect(isSecretPath("frontend.api_keys[3]")).toBe(true);
    expect(isSecretPath("engines[2].env.HF_TOKEN")).toBe(true);
    expect(isSecretPath("engines[2].env.HF_HOME")).toBe(false);
    expect(isSecretPath("frontend.listen")).toBe(false);
  });

  test("secrets inside JSON values (LMCACHE_EXTRA_CONFIG, --kv-transfer-config) are replaced, other JSON kept as is", () => {
    expect(redactEnv({ LMCACHE_EXTRA_CONFIG: JSON.stringify({ password: "pw123456", db: 1 }) })).toEqual({ LMCACHE_EXTRA_CONFIG: JSON.stringify({ password: REDACTED, db: 1 }) });
    const cfg = JSON.stringify({ kv_connector: "LMCacheConnectorV1", kv_connector_extra_config: { auth_token: "tok-1234" } });
    expect(redactArgv(["--kv-transfer-config", cfg])).toEqual(["--kv-transfer-config", JSON.stringify({ kv_connector: "LMCacheConnectorV1", kv_connector_extra_config: { auth_token: REDACTED } })]);
    const plain = '{"enable_kv_cache_events":true,"endpoint":"tcp://*:5557"}';
    expect(redactArgv(["--kv-events-config", plain])).toEqual(["--kv-events-config", plain]);
  });

  test("argv and free text", () => {
    expect(redactArgv(["--api-key", "x", "--password=y", "--tokenizer", "/t", "--token", "--port", "1"])).toEqual(["--api-key", REDACTED, `--password=${REDACTED}`, "--tokenizer", "/t", "--token", "--port", "1"]);
    const c = defaultConfig();
    c.cluster.token = 'tok"en\\value';
    expect(redact(`a ${JSON.stringify({ t: c.cluster.token })} b ${c.cluster.token}`, secretValues(c))).toBe(`a {"t":"${REDACTED}"} b ${REDACTED}`);
  });
});
