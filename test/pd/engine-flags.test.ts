// P/D role flags and environment against vLLM's NixlConnector docs (docs/features/nixl_connector_usage.md,
// vllm/config/kv_transfer.py) and SGLang's (server_args.py disaggregation flags, mini_lb.py),
// and the side-channel / bootstrap port plan against the engine plan's own ports.
import { describe, expect, test } from "bun:test";
import { defaultConfig, parseConfigText } from "../../src/config/index.ts";
import type { EngineConfig, PdConfig } from "../../src/config/types.ts";
import { checkEngines } from "../../src/engine/check.ts";
import { planEngines } from "../../src/engine/plan.ts";
import { parseKvTransferConfig } from "../../src/engine/sim/kv-transfer-config.ts";
import { parseSimArgs } from "../../src/engine/sim/options.ts";
import type { EnginePlan } from "../../src/engine/types.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { pdEngineFlags, vllmKvTransferConfig } from "../../src/pd/engine-flags.ts";
import { describePdPorts, planPdPorts, portsOfPlan } from "../../src/pd/ports.ts";
import { engine, model, testConfig } from "../fixtures/engines/config.ts";

const PD: PdConfig = { min_prefill_tokens: 512, nixl_metadata: "herd", nixl_metadata_host: "127.0.0.1", nixl_metadata_idle_timeout_ms: 0, kv_load_failure_policy: "recompute", prefill_queue_max: 8 };
const flagValue = (argv: string[], flag: string) => {
  const i = argv.indexOf(flag);
  expect(i, `${flag} in ${argv.join(" ")}`).toBeGreaterThanOrEqual(0);
  return argv[i + 1]!;
};

describe("vLLM NixlConnector flags", () => {
  test("--kv-transfer-config: NixlConnector, kv_both, the configured failure policy, UCX, 30 s lease", () => {
    for (const role of ["prefill", "decode"] as const) {
      const f = pdEngineFlags({ kind: "vllm", role, pd: PD, advertise: "10.0.0.7", ports: { sideChannel: { port: 20010, span: 2 } }, nixlMetadataEndpoint: "10.0.0.7:20099" });
      expect(JSON.parse(flagValue(f.args, "--kv-transfer-config"))).toEqual({
        kv_connector: "NixlConnector", kv_role: "kv_both", kv_load_failure_policy: "recompute",
        kv_connector_extra_config: { backends: ["UCX"], kv_lease_duration: 30 },
      });
      expect(f.env).toEqual({
        VLLM_NIXL_SIDE_CHANNEL_HOST: "10.0.0.7", VLLM_NIXL_SIDE_CHANNEL_PORT: "20010",
        NIXL_TCPSTORE_ENDPOINT: "10.0.0.7:20099", NIXL_TCPSTORE_ENDPOINTS: "10.0.0.7:20099",
      });
    }
    expect(JSON.parse(vllmKvTransferConfig("fail")).kv_load_failure_policy).toBe("fail");
  });

  test("nixl_metadata none: no TCPStore endpoint; aggregated and unsupported kinds get nothing", () => {
    const f = pdEngineFlags({ kind: "vllm", role: "decode", pd: { ...PD, nixl_metadata: "none" }, advertise: "h", ports: { sideChannel: { port: 1, span: 1 } }, nixlMetadataEndpoint: null });
    expect(Object.keys(f.env).sort()).toEqual(["VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT"]);
    expect(pdEngineFlags({ kind: "vllm", role: "aggregated", pd: PD, advertise: "h", ports: undefined, nixlMetadataEndpoint: null })).toEqual({ args: [], env: {} });
    expect(pdEngineFlags({ kind: "trtllm", role: "prefill", pd: PD, advertise: "h", ports: undefined, nixlMetadataEndpoint: null })).toEqual({ args: [], env: {} });
    expect(() => pdEngineFlags({ kind: "vllm", role: "prefill", pd: PD, advertise: "h", ports: { sideChannel: { port: 1, span: 1 } }, nixlMetadataEndpoint: null })).toThrow(/metadata endpoint/);
    expect(() => pdEngineFlags({ kind: "vllm", role: "prefill", pd: { ...PD, nixl_metadata: "none" }, advertise: "h", ports: {}, nixlMetadataEndpoint: null })).toThrow(/side-channel/);
  });

  test("the sim engine accepts the flags herd gives vLLM (same JSON, same env)", () => {
    const f = pdEngineFlags({ kind: "sim", role: "prefill", pd: PD, advertise: "127.0.0.1", ports: { sideChannel: { port: 20011, span: 1 } }, nixlMetadataEndpoint: "127.0.0.1:1" });
    const o = parseSimArgs(f.args)!;
    expect(o.kvTransfer).toMatchObject({ connector: "NixlConnector", role: "kv_both", loadFailurePolicy: "recompute", leaseDurationS: 30 });
    expect(parseKvTransferConfig(flagValue(f.args, "--kv-transfer-config")).loadFailurePolicy).toBe("recompute");
  });
});

describe("SGLang disaggregation flags", () => {
  test("prefill: mode, transfer backend, its own bootstrap port; decode: mode and backend only", () => {
    const p = pdEngineFlags({ kind: "sglang", role: "prefill", pd: PD, advertise: "10.0.0.7", ports: { bootstrap: 20020 }, nixlMetadataEndpoint: "10.0.0.7:20099" });
    expect(p.args).toEqual(["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl", "--disaggregation-bootstrap-port", "20020"]);
    expect(p.env.NIXL_TCPSTORE_ENDPOINT).toBe("10.0.0.7:20099");
    const d = pdEngineFlags({ kind: "sglang", role: "decode", pd: { ...PD, nixl_metadata: "none" }, advertise: "10.0.0.7", ports: undefined, nixlMetadataEndpoint: null });
    expect(d).toEqual({ args: ["--disaggregation-mode", "decode", "--disaggregation-transfer-backend", "nixl"], env: {} });
    expect(() => pdEngineFlags({ kind: "sglang", role: "prefill", pd: { ...PD, nixl_metadata: "none" }, advertise: "h", ports: {}, nixlMetadataEndpoint: null })).toThrow(/bootstrap/);
    // The sim engine takes SGLang's flags too (its SGLang mode), so herd's SGLang P/D runs on sims.
    expect(parseSimArgs(p.args)).toMatchObject({ disaggregationMode: "prefill", disaggregationBootstrapPort: 20020 });
    expect(parseSimArgs(d.args)?.disaggregationMode).toBe("decode");
    expect(() => parseSimArgs(["--disaggregation-mode", "both"])).toThrow(/prefill or decode/);
  });
});

const qwen = model({ name: "qwen3-8b", path: "Qwen/Qwen3-8B" });
const plan = (engines: EngineConfig[], start = 9000) =>
  planEngines(testConfig({ models: [qwen], engines, supervisor: { port_range_start: start } }), { self: ["/usr/local/bin/herd"], isPortFree: () => true });

/** Every port a host's engines would bind, with who binds it. */
function allPorts(plans: EnginePlan[], pd: ReturnType<typeof planPdPorts>): [number, string][] {
  const out: [number, string][] = [];
  for (const p of plans) for (const port of portsOfPlan(p)) out.push([port, `${p.id} http/kv`]);
  for (const [id, x] of pd) {
    if (x.sideChannel) for (let k = 0; k < x.sideChannel.span; k++) out.push([x.sideChannel.port + k, `${id} side channel`]);
    if (x.bootstrap !== undefined) out.push([x.bootstrap, `${id} bootstrap`]);
  }
  return out;
}
const dupes = (ports: [number, string][]) => {
  const seen = new Map<number, string>();
  const d: string[] = [];
  for (const [p, who] of ports) {
    if (seen.has(p)) d.push(`${p}: ${seen.get(p)} and ${who}`);
    seen.set(p, who);
  }
  return d;
};

describe("P/D port plan", () => {
  test("2 prefill + 2 decode vLLM (TP 2) beside SGLang P/D and an aggregated sim: nothing collides", () => {
    const plans = plan([
      engine({ kind: "vllm", model: "qwen3-8b", count: 2, role: "prefill", gpus: [0, 1, 2, 3] }),
      engine({ kind: "vllm", model: "qwen3-8b", count: 2, role: "decode", gpus: [4, 5, 6, 7] }),
      engine({ kind: "sglang", model: "qwen3-8b", count: 2, role: "prefill" }),
      engine({ kind: "sglang", model: "qwen3-8b", count: 1, role: "decode" }),
      engine({ kind: "sim", model: "qwen3-8b", count: 1 }),
    ]);
    // The P/D range starts where the engine ports are: the planner must skip every one of them.
    const pd = planPdPorts(plans, { start: 9000 });
    expect([...pd.keys()]).toEqual(["n1/vllm-0", "n1/vllm-1", "n1/vllm-2", "n1/vllm-3", "n1/sglang-0", "n1/sglang-1"]);
    expect(pd.get("n1/vllm-0")!.sideChannel!.span).toBe(2);
    expect(pd.get("n1/sglang-2")).toBeUndefined(); // decode: no bootstrap server
    expect(dupes(allPorts(plans, pd))).toEqual([]);
    expect(describePdPorts(pd)[0]).toMatch(/^n1\/vllm-0: NIXL side channel \d+-\d+ \(VLLM_NIXL_SIDE_CHANNEL_PORT=\d+\)$/);
  });

  test("explicit engine ports and ports held outside herd are skipped", () => {
    const plans = plan([
      engine({ kind: "vllm", model: "qwen3-8b", count: 2, role: "prefill", port: 5601 }),
      engine({ kind: "vllm", model: "qwen3-8b", count: 1, role: "decode" }),
    ]);
    const held = new Set([5600, 5604]);
    const pd = planPdPorts(plans, { start: 5600, isPortFree: (p) => !held.has(p), reserved: [5603] });
    const sc = [...pd.values()].map((x) => x.sideChannel!.port);
    expect(sc).toEqual([5605, 5606, 5607]);
  });

  test("seeded random hosts: no two binders ever share a port", () => {
    const rng = new SeededRng(13);
    const kinds = ["vllm", "sglang", "sim"] as const;
    const roles = ["aggregated", "prefill", "decode"] as const;
    for (let trial = 0; trial < 200; trial++) {
      const entries: EngineConfig[] = [];
      for (let i = 0; i < 1 + rng.int(5); i++) {
        const count = 1 + rng.int(3);
        const tp = 1 + rng.int(3);
        const kind = kinds[rng.int(3)]!;
        entries.push(engine({
          kind, model: "qwen3-8b", count, role: roles[rng.int(3)]!,
          gpus: kind === "sim" ? [] : Array.from({ length: count * tp }, (_, g) => g),
          port: rng.float() < 0.3 ? 9000 + rng.int(40) * 4 : 0,
        }));
      }
      let plans: EnginePlan[];
      try {
        plans = plan(entries, 9000 + rng.int(20));
      } catch {
        continue; // explicit ports that overlap each other are the config validator's business
      }
      const taken = new Set(Array.from({ length: 10 }, () => 9000 + rng.int(80)));
      const pd = planPdPorts(plans, { start: 9000 + rng.int(30), isPortFree: (p) => !taken.has(p) });
      const ports = allPorts(plans, pd);
      const ours = ports.filter(([, who]) => !who.endsWith("http/kv"));
      expect(ours.filter(([p]) => taken.has(p))).toEqual([]);
      // Explicit-port engines may collide among themselves (validate.ts reports it); ours never do.
      const engineSide = new Set(ports.filter(([, w]) => w.endsWith("http/kv")).map(([p]) => p));
      expect(ours.filter(([p]) => engineSide.has(p))).toEqual([]);
      expect(dupes(ours)).toEqual([]);
    }
  });
});

describe("pd config section (issue 13 public contract)", () => {
  test("defaults and the example's keys", () => {
    const c = defaultConfig({ hostname: "n1", dataDir: "/tmp/x" });
    expect(c.pd).toEqual({ min_prefill_tokens: 512, nixl_metadata: "herd", nixl_metadata_host: "127.0.0.1", nixl_metadata_idle_timeout_ms: 0, kv_load_failure_policy: "recompute", prefill_queue_max: 8 });
  });

  const yaml = (pd: string, engines: string) => `models:\n  - { name: q, tokenizer: "" }\nengines:\n${engines}\n${pd}`;
  test("the issue's example parses; bad values are findings with their path", () => {
    const ok = parseConfigText(yaml("pd:\n  min_prefill_tokens: 256\n  nixl_metadata: none\n  kv_load_failure_policy: fail\n", "  - { kind: sim, model: q, count: 2, role: prefill }\n  - { kind: sim, model: q, count: 2, role: decode }"));
    expect(ok.findings.filter((f) => f.severity === "error")).toEqual([]);
    expect(ok.config!.pd).toEqual({ min_prefill_tokens: 256, nixl_metadata: "none", nixl_metadata_host: "127.0.0.1", nixl_metadata_idle_timeout_ms: 0, kv_load_failure_policy: "fail", prefill_queue_max: 8 });
    const bad = parseConfigText(yaml("pd:\n  nixl_metadata: etcd\n", "  - { kind: sim, model: q }"));
    expect(bad.config).toBeFalsy();
    expect(bad.findings.some((f) => f.path === "pd.nixl_metadata" && f.line === 6)).toBe(true);
  });

  test("warnings: a prefill pool with no decode engine; a role on a kind herd cannot configure", () => {
    const r = parseConfigText(yaml("", "  - { kind: sim, model: q, role: prefill }\n  - { kind: command, model: q, role: prefill, command: [x, '{port}'] }"));
    // The kind's P/D flow is its driver's (src/engine/check.ts), the pairing the config's.
    const all = [...r.findings, ...checkEngines(r.config!, { ids: [], source: "given" })];
    const w = all.filter((f) => f.severity === "warning").map((f) => `${f.path}: ${f.message}`);
    expect(w).toContain('engines[0].role: no decode engine on this node serves "q": prefill workers get no traffic until a decode worker of it exists here or on another cluster node');
    expect(w.some((x) => x.startsWith("engines[1].role: herd sets no P/D flags for kind command"))).toBe(true);
    const paired = parseConfigText(yaml("", "  - { kind: sim, model: q, role: prefill }\n  - { kind: sim, model: q, role: decode }"));
    expect(paired.findings).toEqual([]);
  });
});
