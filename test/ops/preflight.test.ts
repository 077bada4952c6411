// `herd run` checks every file its config names before it binds the listener or spawns an engine
// (src/config/files.ts): with the README's example config, the missing tokenizer directory is one
// finding with key path and line, and nothing is started (no "listening", no vllm).
import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { checkConfigFiles, lineOfKey } from "../../src/config/files.ts";
import { driverFor } from "../../src/engine/drivers/registry.ts";
import { parseConfigText } from "../../src/config/load.ts";
import { ROOT, cleanup, tempDir } from "./helpers.ts";

const dir = tempDir("herd-preflight-");
const loads = (kind: Parameters<typeof driverFor>[0]) => driverFor(kind).loadsModelPath;
afterAll(() => cleanup(dir));

/** The README's example config (its first yaml block), with data_dir moved into the test's dir. */
function readmeConfig(): string {
  const readme = readFileSync(join(ROOT, "README.md"), "utf8");
  const m = /```yaml\n([\s\S]*?)```/.exec(readme);
  if (!m) throw new Error("README has no yaml block");
  return m[1]!
    .replace(/data_dir: [^ ,}]+/, `data_dir: ${JSON.stringify(join(dir, "data"))}`)
    // GPU ids are checked elsewhere (and need GPUs); this test is about files.
    .replace(/^\s*gpus: .*\n/m, "");
}

describe("herd run with files that are not there", () => {
  test("the README's example config: exit 1 naming the tokenizer path and its line; nothing listens or spawns", () => {
    const yaml = readmeConfig();
    const cfg = join(dir, "herd.yaml");
    writeFileSync(cfg, yaml);
    const line = yaml.split("\n").findIndex((l) => /^\s*tokenizer:/.test(l)) + 1;
    const p = Bun.spawnSync([process.execPath, "src/cli.ts", "run", "--config", cfg, "--listen", "127.0.0.1:0"], {
      cwd: ROOT, stdout: "pipe", stderr: "pipe", timeout: 20_000, env: { ...process.env, PATH: `${dir}/nobin:/usr/bin:/bin` },
    });
    const out = p.stderr.toString() + p.stdout.toString();
    expect(p.exitCode).toBe(1);
    expect(out).toContain(`models[0].tokenizer: tokenizer directory /models/Qwen3-8B does not exist at ${cfg}:${line}`);
    // (A GPU warning may name engines[0]; what must not appear is a listener or a spawned engine.)
    expect(out).not.toMatch(/listening|engine.*worker|vllm serve/);
  });

  test("each kind of file: tokenizer dir, tokenizer.json inside it, local model path, command executable", () => {
    const tok = join(dir, "tok");
    mkdirSync(tok, { recursive: true });
    const script = join(dir, "engine.sh");
    writeFileSync(script, "#!/bin/sh\n");
    const yaml = `models:
  - name: a
    tokenizer: ${tok}
  - name: b
    path: ${join(dir, "weights")}
engines:
  - kind: vllm
    model: b
  - kind: command
    model: a
    command: [${script}, --port, "{port}"]
  - kind: command
    model: a
    command: [no-such-engine-binary, --port, "{port}"]
`;
    const r = parseConfigText(yaml, "t.yaml", { hostname: "h", dataDir: join(dir, "d") });
    expect(r.config).toBeDefined();
    const file = join(dir, "t.yaml");
    writeFileSync(file, yaml);
    const msgs = (at: string) => checkConfigFiles(r.config!, file, loads).filter((f) => f.path === at).map((f) => `${f.message} @${f.line}`);
    expect(msgs("models[0].tokenizer")).toEqual([`${join(tok, "tokenizer.json")} does not exist @3`]);
    expect(msgs("models[1].path")).toEqual([`model path ${join(dir, "weights")} does not exist @5`]);
    expect(msgs("engines[1].command")).toEqual([`${script} is not an executable file @11`]);
    expect(msgs("engines[2].command")).toEqual([`no-such-engine-binary is not on $PATH @14`]);
    // Fixed: no findings at all.
    writeFileSync(join(tok, "tokenizer.json"), "{}");
    mkdirSync(join(dir, "weights"));
    chmodSync(script, 0o755);
    r.config!.engines.pop();
    expect(checkConfigFiles(r.config!, file, loads)).toEqual([]);
  });

  test("the embedded default names no file; lines of nested keys", () => {
    const r = parseConfigText("", "<embedded>", { hostname: "h", dataDir: join(dir, "d") });
    expect(checkConfigFiles(r.config!, null, loads)).toEqual([]);
    expect(lineOfKey("a: 1\nmodels:\n  - name: x\n    tokenizer: /t\n", "models[0].tokenizer")).toBe(4);
    expect(lineOfKey("models:\n  - name: x\n", "models[0].tokenizer")).toBe(2); // absent key: its parent's line
  });
});
