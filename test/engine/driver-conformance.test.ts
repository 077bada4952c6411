// One conformance suite over every engine driver (issue 9 item 3): the contract in
// src/engine/driver.ts, checked the same way for each kind in the registry.
import { describe, expect, test } from "bun:test";
import { ENGINE_KINDS } from "../../src/config/types.ts";
import type { EngineDriver } from "../../src/engine/driver.ts";
import { launchHash } from "../../src/engine/drivers/common.ts";
import { ALL_DRIVERS, driverFor } from "../../src/engine/drivers/registry.ts";
import type { DriverInput, EnginePlan } from "../../src/engine/types.ts";
import type { PdConfig } from "../../src/config/types.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { pdEngineFlags } from "../../src/pd/engine-flags.ts";
import { applyTierLaunch } from "../../src/tier/launch.ts";
import { sglangMetrics, vllmMetrics } from "../router/exposition.ts";
import { engine, model, testConfig } from "../fixtures/engines/config.ts";

const trtllmStats = JSON.stringify([
  { iter: 9, numActiveRequests: 2, numQueuedRequests: 1, kvCacheStats: { usedNumBlocks: 30, maxNumBlocks: 120, tokensPerBlock: 32 } },
]);
/** A realistic metrics body for each kind, and the load it must read. */
const OWN_METRICS: Record<string, { body: string; running: number; waiting: number; kv: number }> = {
  vllm: { body: vllmMetrics({ running: 3, waiting: 1, kv: 0.25 }), running: 3, waiting: 1, kv: 0.25 },
  sim: { body: vllmMetrics({ running: 3, waiting: 1, kv: 0.25 }), running: 3, waiting: 1, kv: 0.25 },
  command: { body: vllmMetrics({ running: 3, waiting: 1, kv: 0.25 }), running: 3, waiting: 1, kv: 0.25 },
  external: { body: vllmMetrics({ running: 3, waiting: 1, kv: 0.25 }), running: 3, waiting: 1, kv: 0.25 },
  sglang: { body: sglangMetrics({ running: 5, queued: 2, tokenUsage: 0.31 }), running: 5, waiting: 2, kv: 0.31 },
  trtllm: { body: trtllmStats, running: 2, waiting: 1, kv: 0.25 },
};
const PD: PdConfig = { ...defaultConfig().pd, min_prefill_tokens: 512, nixl_metadata: "none", kv_load_failure_policy: "recompute", prefill_queue_max: 8 };
const JUNK = ["", "garbage", "{", "[1,2,null]", "null", '{"a":1}', "\u0000\u0001\u0002", "vllm:num_requests_running{engine=\"0\" 3\n", "x".repeat(10_000)];

function inputFor(d: EngineDriver): DriverInput {
  const entry = engine({
    kind: d.kind,
    model: "m",
    // external: herd starts nothing, so args and env would be config errors.
    ...(d.managed ? { args: ["--extra", "last"], env: { MY_VAR: "1" } } : {}),
    ...(d.kind === "command" ? { command: ["srv", "--port", "{port}"] } : {}),
    ...(d.kind === "external" ? { url: "http://10.0.0.1:8000" } : {}),
  });
  const config = testConfig({ models: [model()], engines: [entry] });
  return {
    id: `n1/${d.kind}-0`, node: config.node, model: config.models[0]!, entry, supervisor: config.supervisor,
    index: 0, port: 9100, gpus: [0], self: ["/usr/local/bin/herd"], drainMs: 30_000,
    ...(d.wantsKvPorts ? { kvPorts: { pub: 9101, replay: 9102 } } : {}),
  };
}

test("the registry has one driver per config kind, each under its own kind", () => {
  expect(ALL_DRIVERS.map((d) => d.kind).sort()).toEqual([...ENGINE_KINDS].sort());
  for (const k of ENGINE_KINDS) expect(driverFor(k).kind).toBe(k);
});

describe.each(ALL_DRIVERS.map((d) => [d.kind, d] as const))("driver %s", (kind, d) => {
  test("namespaced id", () => {
    expect(d.id).toBe(`engine.driver.${kind}`);
  });

  test("launch: a managed kind gets a spec on the planned port, entry args last, base env; unmanaged none", () => {
    const input = inputFor(d);
    const spec = d.launch(input);
    if (!d.managed) {
      expect(spec).toBeNull();
      return;
    }
    expect(spec).not.toBeNull();
    expect(spec!.id).toBe(input.id);
    expect(spec!.port).toBe(9100);
    expect(spec!.argv).toContain("9100");
    expect(spec!.url).toBe("http://127.0.0.1:9100");
    expect(spec!.healthPath).toBe("/health");
    expect(spec!.argv.slice(-2)).toEqual(["--extra", "last"]);
    expect(spec!.env).toMatchObject({ CUDA_VISIBLE_DEVICES: "0", PYTHONHASHSEED: "0", MY_VAR: "1" });
    if (d.wantsKvPorts) expect(spec!.kvEvents?.endpoint).toBe("tcp://127.0.0.1:9101");
    // Pure: the same input gives the same launch.
    expect(launchHash(d.launch(input)!)).toBe(launchHash(spec!));
  });

  test("health: 200 is healthy; 503 (loading, draining) and 500 are not", () => {
    expect(d.health.healthy(200)).toBe(true);
    expect(d.health.healthy(503)).toBe(false);
    expect(d.health.healthy(500)).toBe(false);
  });

  test("metrics: reads its own engine's body", () => {
    const own = OWN_METRICS[kind]!;
    expect(d.metrics.path.startsWith("/")).toBe(true);
    const r = d.metrics.read(own.body);
    expect(r.load).toEqual({ running: own.running, waiting: own.waiting, kv_usage: own.kv });
  });

  test("metrics: junk never throws, and never yields out-of-range figures", () => {
    for (const body of JUNK) {
      const r = d.metrics.read(body);
      if (r.load === null) continue;
      for (const v of [r.load.running, r.load.waiting]) if (v !== null) expect(v).toBeGreaterThanOrEqual(0);
      if (r.load.kv_usage !== null) expect(r.load.kv_usage).toBeWithin(0, 1.000001);
    }
  });

  test("kvCapacity: undefined or a positive integer", () => {
    const spec = d.launch(inputFor(d));
    if (!spec) return;
    const n = d.kvCapacity(spec);
    if (n !== undefined) expect(Number.isInteger(n) && n > 0).toBe(true);
  });

  test("check: a plain entry has no error; findings name a key", () => {
    const input = inputFor(d);
    const config = testConfig({ models: [input.model], engines: [input.entry] });
    const fs = d.check(input.entry, { config, model: input.model });
    expect(fs.filter((f) => f.severity === "error")).toEqual([]);
    for (const f of fs) expect(f.key.length).toBeGreaterThan(0);
  });

  test("capabilities are true to the launch: LoRA adapters, sleep mode, P/D flags, the KV tier", () => {
    const input = inputFor(d);
    const withLora = { ...input, model: { ...input.model, lora_adapters: [{ name: "ad-one", path: "/adapters/one", on_demand: false }] } };
    const loraArgv = d.launch(withLora)?.argv.join(" ") ?? "";
    expect(loraArgv.includes("ad-one=/adapters/one")).toBe(d.lora);
    const plain = d.launch(input);
    const asleep = d.launch({ ...input, sleepMode: true });
    expect(plain === null ? false : launchHash(asleep!) !== launchHash(plain)).toBe(d.sleep !== undefined);
    const ports = d.pdFlow === "sglang-bootstrap" ? { bootstrap: 9200 } : { sideChannel: { port: 9200, span: 1 } };
    const pd = pdEngineFlags({ kind, role: "prefill", pd: PD, advertise: "10.0.0.1", ports, nixlMetadataEndpoint: null });
    expect(pd.args.length > 0).toBe(d.pdFlow !== null);
    if (d.pdFlow === "vllm-nixl") expect(pd.env.VLLM_NIXL_SIDE_CHANNEL_PORT).toBe("9200");
    if (d.pdFlow === "sglang-bootstrap") expect(pd.args).toContain("--disaggregation-bootstrap-port");
    const config = testConfig({ models: [input.model], engines: [input.entry] });
    config.kv_tier = { ...config.kv_tier, resp: { listen: "127.0.0.1:6390", password_file: "", peer_fetch_max: 64, peer_fetch_timeout_ms: 500, key_max_bytes: 1024, output_total_max_bytes: 256 << 20, idle_timeout_ms: 0, auth_timeout_ms: 10_000, direct_recv: false } };
    const plans = plain ? [{ id: input.id, kind, entryIndex: 0, spec: plain } as unknown as EnginePlan] : [];
    applyTierLaunch(config, plans, () => null);
    const tierArgv = plain?.argv.join(" ") ?? "";
    expect(tierArgv.includes("--kv-offload-url resp://127.0.0.1:6390")).toBe(d.tier === "sim-offload");
    expect(tierArgv.includes("LMCacheConnectorV1")).toBe(d.tier === "lmcache-vllm");
  });

  test("recover: adopts only the same worker, port and launch", () => {
    const spec = d.launch(inputFor(d));
    if (!spec) {
      expect(d.recover({ worker: "n1/external-0", port: 0, argvHash: "" }, { id: "n1/external-0" } as never)).toBe(false);
      return;
    }
    const same = { worker: spec.id, port: spec.port, argvHash: launchHash(spec) };
    expect(d.recover(same, spec)).toBe(true);
    expect(d.recover({ ...same, port: spec.port + 1 }, spec)).toBe(false);
    expect(d.recover({ ...same, worker: "n1/other-0" }, spec)).toBe(false);
    expect(d.recover({ ...same, argvHash: "0".repeat(32) }, spec)).toBe(false);
  });
});
