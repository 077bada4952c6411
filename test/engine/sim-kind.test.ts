// Kind `sim` end to end: the supervisor re-invokes herd (`src/cli.ts sim-engine …`) and the
// simulated engine answers /health and a chat completion. Skipped until the sim engine exists.
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { resolve } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { isRunning } from "../../src/engine/procfs.ts";
import { Supervisor } from "../../src/engine/supervisor.ts";
import { engine, model, testConfig } from "../fixtures/engines/config.ts";

const SIM_MAIN = resolve(import.meta.dir, "../../src/engine/sim/main.ts");
const simReady = existsSync(SIM_MAIN);
if (!simReady) console.error(`skip: ${SIM_MAIN} not written yet`);

let sup: Supervisor | null = null;
afterEach(async () => {
  await sup?.stop({ drainMs: 0 });
  sup = null;
});

describe("kind sim", () => {
  test.skipIf(!simReady)("starts herd sim-engine, serves a completion, restarts after SIGKILL", async () => {
    const config = testConfig({
      models: [model({ name: "sim-model", max_model_len: 4096 })],
      engines: [engine({ kind: "sim", model: "sim-model", args: ["--time-scale", "100", "--startup-delay-ms", "100"] })],
      supervisor: { startup_timeout_ms: 15_000 },
    });
    const logger = memoryLogger();
    sup = new Supervisor({ config, clock: new RealClock(), logger });
    await sup.start();
    const argv = sup.status()[0]!.plan.spec!.argv;
    expect(argv.slice(0, 3)).toEqual([process.execPath, resolve(import.meta.dir, "../../src/cli.ts"), "sim-engine"]);
    const w = await sup.waitFor("n1/sim-0", ["ready"], 15_000);
    const res = await fetch(`${w.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: "hi" }], max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { model: string; usage: { completion_tokens: number } };
    expect(body.model).toBe("sim-model");
    expect(body.usage.completion_tokens).toBeGreaterThan(0);

    const pid = sup.status()[0]!.pid!;
    process.kill(pid, "SIGKILL");
    await sup.waitFor("n1/sim-0", ["starting"], 5_000);
    const back = await sup.waitFor("n1/sim-0", ["ready"], 15_000);
    expect(back.restarts).toBe(1);
    expect(back.url).toBe(w.url); // same port across restarts
    expect(isRunning(pid)).toBe(false);
  }, 60_000);
});
