// Issue 22, row 13: secret files open to other users (a 0644/0666 token or password file, a config
// holding cluster.token inline at 0644) drew no warning. Now a warning with key path and line in
// `herd config check` and before `herd run` starts.
import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { main, type Entrypoints } from "../../src/cli.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { secretFileFindings } from "../../src/config/secret-perms.ts";

const dir = mkdtempSync(join(tmpdir(), "herd-perms-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function file(name: string, text: string, mode: number): string {
  const p = join(dir, name);
  writeFileSync(p, text);
  chmodSync(p, mode);
  return p;
}

async function herd(...argv: string[]) {
  const r = { code: -1, out: "", err: "", daemon: 0 };
  const entry: Entrypoints = { runDaemon: async () => (r.daemon++, 0), simEngineMain: async () => 0 };
  r.code = await main(argv, { out: (t) => void (r.out += t + "\n"), err: (t) => void (r.err += t + "\n") }, entry);
  return r;
}

describe("secret file permissions", () => {
  test("config check: a 0644 token file and a 0666 password file are warnings with path and line", async () => {
    const token = file("token", "t0ken\n", 0o644);
    const pw = file("pw", "secret\n", 0o666);
    const cfg = file("herd.yaml", `cluster:\n  token_file: ${token}\nkv_tier:\n  ssd: { size: 1GiB, path: ${JSON.stringify(join(dir, "ssd"))} }\n  resp:\n    password_file: ${pw}\n`, 0o600);
    const r = await herd("config", "check", cfg);
    expect(r.code).toBe(0);
    expect(r.err).toContain(`warning: cluster.token_file: token file ${token}: mode 0644 lets every user on the host read it; chmod 0640 ${token}`);
    expect(r.err).toContain(`at ${cfg}:2`);
    expect(r.err).toContain(`warning: kv_tier.resp.password_file: password file ${pw}: mode 0666 lets every user on the host read it`);
    chmodSync(token, 0o600);
    chmodSync(pw, 0o640); // group read: the root:herd pattern, allowed
    const ok = await herd("config", "check", cfg);
    expect(ok.err).not.toContain("mode 0");
  });

  test("a config holding cluster.token inline at 0644: warned at config check and before run starts", async () => {
    const cfg = file("inline.yaml", "cluster:\n  token: abcdefgh\n", 0o644);
    const r = await herd("config", "check", cfg);
    expect(r.err).toContain(`warning: cluster.token: the config holds cluster.token inline, and ${cfg}: mode 0644 lets every user on the host read it`);
    expect(r.err).toContain("or move cluster.token to cluster.token_file");
    const run = await herd("run", "--config", cfg);
    expect(run.daemon).toBe(1);
    expect(run.err).toContain(`${cfg}: mode 0644 lets every user on the host read it`);
    chmodSync(cfg, 0o600);
    expect((await herd("config", "check", cfg)).err).not.toContain("mode 0");
  });

  test("the rule: others' bits and group write are unsafe, group read is not; a config without inline secrets is fine at 0644", () => {
    const c = defaultConfig();
    c.cluster.token_file = "/t";
    const mode = (m: number) => secretFileFindings(c, null, () => 0, () => m).length;
    expect([0o600, 0o640, 0o400, 0o644, 0o604, 0o620, 0o602, 0o660].map(mode)).toEqual([0, 0, 0, 1, 1, 1, 1, 1]);
    const plain = defaultConfig();
    expect(secretFileFindings(plain, "/etc/herd/herd.yaml", () => 0, () => 0o644)).toEqual([]);
    plain.engines[0]!.env = { HF_TOKEN: "hf_x" };
    expect(secretFileFindings(plain, "/etc/herd/herd.yaml", () => 0, () => 0o644)[0]!.path).toBe("engines[0].env.HF_TOKEN");
  });
});
