// Defaults: an empty file is the embedded default; every key has a value; host-dependent defaults
// (node name, data dir) follow the documented order; overrides re-check what they can break.

import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  applyOverrides,
  chooseDataDir,
  configToYaml,
  defaultConfig,
  DEMO_MODEL,
  loadConfigFile,
  parseConfigText,
  POLICIES,
} from "../../src/config/index.ts";

const env = { hostname: "gpu-07", dataDir: "/srv/herd-data" };
const parse = (text: string) => parseConfigText(text, "herd.yaml", env);

describe("embedded default", () => {
  test("one node named after the host, 127.0.0.1:8000, two sim engines of herd-sim", () => {
    const c = defaultConfig(env);
    expect(c.node).toEqual({ name: "gpu-07", advertise: "127.0.0.1", data_dir: "/srv/herd-data" });
    expect(c.frontend.listen).toBe("127.0.0.1:8000");
    expect(POLICIES).toContain(c.router.policy);
    expect(c.router.policy).toBe("kv");
    expect(c.models).toEqual([{ name: DEMO_MODEL, path: DEMO_MODEL, tokenizer: "", block_size: 16, max_model_len: 0, prefix_caching_hash_algo: "", aliases: [], lora_adapters: [] }]);
    expect(c.engines).toHaveLength(1);
    expect(c.engines[0]).toMatchObject({ kind: "sim", model: DEMO_MODEL, count: 2, role: "aggregated", port: 0, url: "" });
    expect(c.planner).toMatchObject({ enabled: false, dry_run: false, pools: [] });
    expect(c.cluster.discovery).toBe("file");
    expect(c.cluster.etcd).toEqual({ endpoints: [], prefix: "/herd", lease_ttl_s: 10 });
    expect(c.kv_tier).toEqual({ cpu: null, ssd: null, resp: null, shared_dirs: [], thread: "worker" });
  });

  test("an empty file, a comment-only file and `{}` all equal the embedded default", () => {
    for (const text of ["", "# nothing here\n", "{}\n", "---\n"]) {
      const r = parse(text);
      expect(r.findings).toEqual([]);
      expect(r.config).toEqual(defaultConfig(env));
    }
  });

  test("generous startup timeout: real engines take minutes to load", () => {
    expect(defaultConfig(env).supervisor.startup_timeout_ms).toBeGreaterThanOrEqual(600_000);
  });

  test("each call returns an independent copy", () => {
    const a = defaultConfig(env);
    a.engines[0]!.args.push("--x");
    a.router.session.header = "changed";
    const b = defaultConfig(env);
    expect(b.engines[0]!.args).toEqual([]);
    expect(b.router.session.header).toBe("x-session-id");
  });
});

describe("partial configs", () => {
  test("missing keys in a section take their defaults; given ones are kept", () => {
    const c = parse("frontend:\n  listen: 0.0.0.0:9000\nrouter:\n  session:\n    header: x-user\n").config!;
    expect(c.frontend.listen).toBe("0.0.0.0:9000");
    expect(c.frontend.drain_timeout_ms).toBe(defaultConfig(env).frontend.drain_timeout_ms);
    expect(c.router.session).toEqual({ header: "x-user", load_factor: 1.25, virtual_nodes: 160 });
  });

  test("a null section (`node:` with nothing under it) means all defaults", () => {
    expect(parse("node:\nrouter:\n").config).toEqual(defaultConfig(env));
  });

  test("models[].path defaults to name; engine entries get every default", () => {
    const c = parse("models:\n  - name: m\n  - name: n\n    path: /models/n\nengines:\n  - kind: vllm\n    model: m\n").config!;
    expect(c.models.map((m) => m.path)).toEqual(["m", "/models/n"]);
    expect(c.engines[0]).toEqual({
      kind: "vllm",
      model: "m",
      count: 1,
      role: "aggregated",
      gpus: [],
      host: "127.0.0.1",
      port: 0,
      args: [],
      env: {},
      command: [],
      url: "",
      kv_events: null,
      health_path: "/health",
      gpu_memory_utilization: 0,
      share_gpu: false,
    });
  });

  test("models without engines: no demo engines sneak in (warning: serves nothing)", () => {
    const r = parse("models:\n  - name: m\n");
    expect(r.config?.engines).toEqual([]);
    expect(r.findings.map((f) => [f.path, f.severity])).toEqual([["engines", "warning"]]);
  });

  test("engines without models: the demo model does not satisfy their reference", () => {
    const r = parse("engines:\n  - kind: sim\n    model: herd-sim\n");
    expect(r.config).toBeUndefined();
    expect(r.findings[0]).toMatchObject({ path: "engines[0].model", line: 3 });
    expect(r.findings[0]!.message).toContain("no models are defined");
  });

  test("YAML anchors and aliases resolve", () => {
    const c = parse("models:\n  - name: m\nengines:\n  - kind: sim\n    model: m\n    args: &a [--time-scale, '5']\n  - kind: vllm\n    model: m\n    args: *a\n").config!;
    expect(c.engines[1]!.args).toEqual(["--time-scale", "5"]);
  });

  test("kv_events takes defaults for its optional keys", () => {
    const text = "models:\n  - name: m\nengines:\n  - kind: external\n    model: m\n    url: http://10.1.2.3:8000\n    kv_events: { endpoint: 'tcp://10.1.2.3:5557' }\n";
    expect(parse(text).config!.engines[0]!.kv_events).toEqual({ endpoint: "tcp://10.1.2.3:5557", replay_endpoint: "", topic: "" });
  });

  test("the resolved YAML parses back to the same config", () => {
    const c = defaultConfig(env);
    expect(parse(configToYaml(c)).config).toEqual(c);
  });
});

describe("data dir choice", () => {
  const facts = (over: Partial<Parameters<typeof chooseDataDir>[0]>) => ({
    uid: 1000,
    env: {},
    home: "/home/ann",
    cwd: "/work",
    canWrite: () => true,
    ...over,
  });
  test("systemd StateDirectory wins", () => {
    expect(chooseDataDir(facts({ uid: 0, env: { STATE_DIRECTORY: "/var/lib/herd:/var/lib/other" } }))).toBe("/var/lib/herd");
  });
  test("root with a writable /var/lib gets /var/lib/herd", () => {
    expect(chooseDataDir(facts({ uid: 0, canWrite: (p) => p === "/var/lib" }))).toBe("/var/lib/herd");
  });
  test("root on a read-only /var/lib falls back to the home directory", () => {
    expect(chooseDataDir(facts({ uid: 0, home: "/root", canWrite: () => false }))).toBe("/root/.local/share/herd");
  });
  test("a normal user gets XDG_DATA_HOME or ~/.local/share", () => {
    expect(chooseDataDir(facts({ env: { XDG_DATA_HOME: "/data/ann" } }))).toBe("/data/ann/herd");
    expect(chooseDataDir(facts({}))).toBe("/home/ann/.local/share/herd");
  });
  test("no home at all: ./.herd under the working directory", () => {
    expect(chooseDataDir(facts({ home: "" }))).toBe("/work/.herd");
  });
});

describe("loading files", () => {
  test("relative data_dir and tokenizer are resolved next to the config file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "herd-config-"));
    try {
      const file = join(dir, "herd.yaml");
      writeFileSync(file, "node:\n  data_dir: state\nmodels:\n  - name: m\n    tokenizer: ../tok\nengines:\n  - kind: sim\n    model: m\n");
      const r = await loadConfigFile(file, env);
      expect(r.file).toBe(file);
      expect(r.config!.node.data_dir).toBe(join(dir, "state"));
      expect(r.config!.models[0]!.tokenizer).toBe(join(dir, "..", "tok"));
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("a missing file is one finding, not an exception", async () => {
    const r = await loadConfigFile("/nonexistent/herd.yaml", env);
    expect(r.config).toBeUndefined();
    expect(r.findings).toEqual([{ path: "", line: 0, severity: "error", message: "cannot read config file: no such file" }]);
  });
});

describe("applyOverrides", () => {
  test("--listen replaces frontend.listen without touching the input", () => {
    const base = defaultConfig(env);
    const r = applyOverrides(base, { listen: "127.0.0.1:0" });
    expect(r.config?.frontend.listen).toBe("127.0.0.1:0");
    expect(base.frontend.listen).toBe("127.0.0.1:8000");
  });

  test("a malformed --listen is an error naming the flag", () => {
    const r = applyOverrides(defaultConfig(env), { listen: "8000" });
    expect(r.config).toBeUndefined();
    expect(r.findings[0]).toMatchObject({ path: "--listen", severity: "error" });
  });

  test("--listen onto an engine's port is caught", () => {
    const c = parse("models:\n  - name: m\nengines:\n  - kind: vllm\n    model: m\n    port: 9100\n").config!;
    const r = applyOverrides(c, { listen: "127.0.0.1:9100" });
    expect(r.config).toBeUndefined();
    expect(r.findings[0]!.message).toContain("(set by --listen)");
  });

  test("no overrides: the same config back", () => {
    const c = defaultConfig(env);
    expect(applyOverrides(c, {})).toEqual({ config: c, findings: [] });
  });
});
