// Sleep mode at the engine seam: the sim engine's vLLM endpoints (POST /sleep?level=1, POST
// /wake_up, GET /is_sleeping; mounted only in sleep mode) and the vLLM launch line with sleep mode.
import { afterEach, describe, expect, test } from "bun:test";
import { startSimEngine, type SimEngine } from "../../src/engine/sim/server.ts";
import { driverFor } from "../../src/engine/drivers/registry.ts";
import { planEngines } from "../../src/engine/plan.ts";
import { engine, model, testConfig } from "../fixtures/engines/config.ts";

const engines: SimEngine[] = [];
afterEach(async () => {
  await Promise.all(engines.splice(0).map((e) => e.stop()));
});

const post = (url: string, body?: unknown) =>
  fetch(url, { method: "POST", headers: { "content-type": "application/json" }, ...(body ? { body: JSON.stringify(body) } : {}) });
const complete = (e: SimEngine) => post(`${e.url}/v1/completions`, { model: "sim", prompt: "hi", max_tokens: 2 });

describe("sim engine sleep mode", () => {
  test("asleep, generation gets 503 and /health stays 200; awake again after /wake_up", async () => {
    const e = await startSimEngine({ port: 0, sleepMode: true, zeroDelay: true, wakeDelayMs: 50 });
    engines.push(e);
    expect(await (await fetch(`${e.url}/is_sleeping`)).json()).toEqual({ is_sleeping: false });
    expect((await post(`${e.url}/sleep?level=1`)).status).toBe(200);
    expect(await (await fetch(`${e.url}/is_sleeping`)).json()).toEqual({ is_sleeping: true });
    const refused = await complete(e);
    expect(refused.status).toBe(503);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toMatch(/sleeping/);
    expect((await fetch(`${e.url}/health`)).status).toBe(200);
    expect((await post(`${e.url}/wake_up`)).status).toBe(200);
    expect((await complete(e)).status).toBe(200);
    expect((await fetch(`${e.url}/sleep`)).status).toBe(405);
  });

  test("without sleep mode the endpoints do not exist", async () => {
    const e = await startSimEngine({ port: 0, zeroDelay: true });
    engines.push(e);
    expect((await post(`${e.url}/sleep`)).status).toBe(404);
    expect((await complete(e)).status).toBe(200);
  });
});

describe("launch lines with sleep mode", () => {
  test("vLLM gets --enable-sleep-mode and VLLM_SERVER_DEV_MODE=1 only for a sleeping planner pool", () => {
    const config = testConfig({ models: [model()], engines: [engine({ kind: "vllm", count: 2, gpus: [0, 1] }), engine({ kind: "vllm", gpus: [2], role: "decode" })] });
    config.planner = { ...config.planner, enabled: true, pools: [{ engine: 0, min: 1, max: 2, prefill_tokens_per_s: 1, decode_tokens_per_s: 1, can_sleep: true, floors: [], pin: -1 }] };
    const plans = planEngines(config, { self: ["herd"], isPortFree: () => true, hostGpus: { ids: [0, 1, 2], source: "given" } });
    // The pool starts with its min (1 of count 2); the other entry keeps its count.
    expect(plans.map((p) => p.entryIndex)).toEqual([0, 1]);
    expect(plans[0]!.spec!.argv).toContain("--enable-sleep-mode");
    expect(plans[0]!.spec!.env.VLLM_SERVER_DEV_MODE).toBe("1");
    expect(plans[1]!.spec!.argv).not.toContain("--enable-sleep-mode");
    expect(plans[1]!.spec!.env.VLLM_SERVER_DEV_MODE).toBeUndefined();
    expect(driverFor("vllm").sleep).toEqual({ sleepPath: "/sleep?level=1", wakePath: "/wake_up" });
    expect(driverFor("sglang").sleep).toBeUndefined();
  });
});
