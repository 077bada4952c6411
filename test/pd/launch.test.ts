// The P/D launch wiring (src/pd/launch.ts): after the engine plan, every prefill/decode worker's
// command line and environment get its role flags and a side-channel / bootstrap port of its own
// (the same planEngines the supervisor runs, through PlanOptions.finish), and `herd run --dry-run`
// shows them. Aggregated engines keep exactly the command line they had.
import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { main } from "../../src/cli.ts";
import type { EngineConfig } from "../../src/config/types.ts";
import { planEngines } from "../../src/engine/plan.ts";
import { parseSimArgs } from "../../src/engine/sim/options.ts";
import type { EnginePlan } from "../../src/engine/types.ts";
import { applyPdLaunch, pdModels } from "../../src/pd/launch.ts";
import { portsOfPlan } from "../../src/pd/ports.ts";
import { engine, model, testConfig } from "../fixtures/engines/config.ts";
import { cleanup, tempDir } from "../helpers/herd.ts";

const qwen = model({ name: "qwen3-8b", path: "Qwen/Qwen3-8B" });
const cfg = (engines: EngineConfig[]) => testConfig({ models: [qwen], engines, supervisor: { port_range_start: 9000 } });

function planned(engines: EngineConfig[], endpoint = "10.0.0.5:7000", bootstrap?: (id: string, port: number) => void): { plans: EnginePlan[]; lines: string[] } {
  const config = cfg(engines);
  let lines: string[] = [];
  const plans = planEngines(config, { self: ["/usr/local/bin/herd"], isPortFree: () => true, finish: (ps) => void (lines = applyPdLaunch(config, ps, { nixlEndpoint: () => endpoint, ...(bootstrap ? { bootstrap } : {}) })) });
  return { plans, lines };
}

describe("P/D launch wiring", () => {
  test("vLLM prefill/decode: --kv-transfer-config before the entry's args, side-channel env, herd's NIXL endpoint; aggregated untouched", () => {
    const agg = [engine({ kind: "vllm", model: "qwen3-8b", count: 1, gpus: [4] })];
    const before = planned(agg).plans[0]!.spec!;
    const { plans, lines } = planned([
      engine({ kind: "vllm", model: "qwen3-8b", count: 2, role: "prefill", gpus: [0, 1], args: ["--max-num-seqs", "64"] }),
      engine({ kind: "vllm", model: "qwen3-8b", count: 1, role: "decode", gpus: [2] }),
      ...agg.map((e) => ({ ...e, gpus: [3] })),
    ]);
    const [p0, p1, d0, a0] = plans.map((p) => p.spec!);
    for (const s of [p0!, p1!, d0!]) {
      const at = s.argv.indexOf("--kv-transfer-config");
      expect(at).toBeGreaterThan(0);
      expect(JSON.parse(s.argv[at + 1]!)).toMatchObject({ kv_connector: "NixlConnector", kv_role: "kv_both", kv_load_failure_policy: "recompute" });
      expect(s.env.VLLM_NIXL_SIDE_CHANNEL_HOST).toBe("127.0.0.1");
      expect(s.env.NIXL_TCPSTORE_ENDPOINT).toBe("10.0.0.5:7000");
      expect(s.env.NIXL_TCPSTORE_ENDPOINTS).toBe("10.0.0.5:7000");
    }
    expect(p0!.argv.slice(-2)).toEqual(["--max-num-seqs", "64"]); // the entry's own args stay last
    const side = [p0!, p1!, d0!].map((s) => Number(s.env.VLLM_NIXL_SIDE_CHANNEL_PORT));
    const engines = plans.flatMap(portsOfPlan);
    expect(new Set([...side, ...engines]).size).toBe(side.length + engines.length);
    expect(a0!.argv.filter((a) => a !== String(a0!.port) && !a.includes("tcp://"))).toEqual(before.argv.filter((a) => a !== String(before.port) && !a.includes("tcp://")));
    expect(a0!.env.VLLM_NIXL_SIDE_CHANNEL_PORT).toBeUndefined();
    expect(lines.filter((l) => l.includes("NIXL side channel")).length).toBe(3);
    expect(lines.at(-1)).toBe("NIXL metadata service (NIXL_TCPSTORE_ENDPOINT): 10.0.0.5:7000");
  });

  test("sim and SGLang: the sim parses its flags; SGLang prefill gets its bootstrap port, decode none; SGLang models run the P/D plan (SGLang's flow)", () => {
    const { plans } = planned([
      engine({ kind: "sim", model: "qwen3-8b", count: 1, role: "prefill" }),
      engine({ kind: "sglang", model: "qwen3-8b", count: 1, role: "prefill" }),
      engine({ kind: "sglang", model: "qwen3-8b", count: 1, role: "decode" }),
    ]);
    const sim = plans[0]!.spec!;
    const o = parseSimArgs(sim.argv.slice(sim.argv.indexOf("sim-engine") + 1))!;
    expect(o.kvTransfer?.loadFailurePolicy).toBe("recompute");
    const sp = plans[1]!.spec!.argv;
    expect(sp.slice(sp.indexOf("--disaggregation-mode"), sp.indexOf("--disaggregation-mode") + 4)).toEqual(["--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "nixl"]);
    expect(sp).toContain("--disaggregation-bootstrap-port");
    expect(plans[2]!.spec!.argv).not.toContain("--disaggregation-bootstrap-port");
    expect([...pdModels(cfg([engine({ kind: "sglang", model: "qwen3-8b", count: 1, role: "prefill" }), engine({ kind: "sglang", model: "qwen3-8b", count: 1, role: "decode" })]))]).toEqual(["qwen3-8b"]);
    // Prefill engines of two flows for one model: not P/D (flow.ts modelFlow).
    expect(pdModels(cfg([engine({ kind: "sim", model: "qwen3-8b", count: 1, role: "prefill" }), engine({ kind: "sglang", model: "qwen3-8b", count: 1, role: "prefill" }), engine({ kind: "sglang", model: "qwen3-8b", count: 1, role: "decode" })])).size).toBe(0);
    expect([...pdModels(cfg([engine({ kind: "sim", model: "qwen3-8b", count: 1, role: "prefill" }), engine({ kind: "sim", model: "qwen3-8b", count: 1, role: "decode" })]))]).toEqual(["qwen3-8b"]);
  });

  test("a sim prefill entry with SGLang's --disaggregation-mode puts its model in SGLang's flow: both roles launched with SGLang's flags, the bootstrap port reported", () => {
    const ports = new Map<string, number>();
    const config = cfg([
      engine({ kind: "sim", model: "qwen3-8b", count: 1, role: "prefill", args: ["--disaggregation-mode", "prefill"] }),
      engine({ kind: "sim", model: "qwen3-8b", count: 1, role: "decode" }),
    ]);
    const { plans } = planned(config.engines, undefined, (id, port) => ports.set(id, port));
    const [p, d] = plans.map((x) => x.spec!.argv);
    const po = parseSimArgs(p!.slice(p!.indexOf("sim-engine") + 1))!;
    expect(po.disaggregationMode).toBe("prefill");
    expect(po.disaggregationBootstrapPort).toBe(ports.get(plans[0]!.id)!);
    expect(po.kvTransfer).toBeNull();
    expect(parseSimArgs(d!.slice(d!.indexOf("sim-engine") + 1))!.disaggregationMode).toBe("decode");
    expect(d).not.toContain("--disaggregation-bootstrap-port");
    expect([...pdModels(config)]).toEqual(["qwen3-8b"]);
  });

  test("herd run --dry-run prints each P/D worker's ports and the flags in its argv", async () => {
    const dir = tempDir("herd-pd-dry-");
    try {
      const file = join(dir, "herd.yaml");
      writeFileSync(file, "supervisor: { port_range_start: 43000 }\nmodels: [{ name: m }]\nengines:\n  - { kind: sim, model: m, count: 2, role: prefill }\n  - { kind: sim, model: m, count: 1, role: decode }\n");
      let out = "";
      const io = { out: (t: string) => void (out += t + "\n"), err: () => {} };
      const entry = { runDaemon: async () => { throw new Error("must not start"); }, simEngineMain: async () => 0 };
      expect(await main(["run", "--dry-run", "--config", file], io, entry)).toBe(0);
      expect(out).toContain("## P/D ports");
      expect(out.match(/sim-\d: NIXL side channel \d+ \(VLLM_NIXL_SIDE_CHANNEL_PORT=\d+\)/g)?.length).toBe(3);
      expect(out).toMatch(/VLLM_NIXL_SIDE_CHANNEL_PORT=\d+/);
      expect(out).toContain("NIXL_TCPSTORE_ENDPOINT='127.0.0.1:<port bound at start>'");
      expect(out).toMatch(/--kv-transfer-config '\{"kv_connector":"NixlConnector"/);
    } finally {
      cleanup(dir);
    }
  });
});
