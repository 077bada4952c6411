// Issue 9 item 3, `recover`: after a herd restart, the previous herd's still-healthy engines are
// adopted instead of killed (a loaded model is minutes of warm-up); engines the new plan does not
// match, or that no longer answer their health check, are terminated as before. Real sim-engine
// processes, a real herd (supervise.ts) SIGKILLed in between.
import { afterEach, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import type { Config } from "../../src/config/types.ts";
import { RealClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { EngineRecordFile } from "../../src/engine/orphans.ts";
import { isRunning } from "../../src/engine/procfs.ts";
import { Supervisor } from "../../src/engine/supervisor.ts";
import { engine, model, tempDir, testConfig } from "../fixtures/engines/config.ts";

const SUPERVISE = resolve(import.meta.dir, "../fixtures/engines/supervise.ts");
const ID = "n1/sim-0";

let sup: Supervisor | null = null;
const killed: number[] = [];
afterEach(async () => {
  await sup?.stop({ drainMs: 0 });
  sup = null;
  for (const pid of killed.splice(0)) {
    try {
      process.kill(-pid, "SIGKILL");
    } catch {
      // gone
    }
  }
});

function simConfig(dataDir: string, env: Record<string, string> = {}): Config {
  return testConfig({
    dataDir,
    models: [model({ name: "sim-model" })],
    // HERD_SUPERVISOR_PID "": behave like a real engine, which does not notice its herd dying.
    engines: [engine({ kind: "sim", model: "sim-model", args: ["--time-scale", "100"], env: { HERD_SUPERVISOR_PID: "", ...env } })],
    supervisor: { startup_timeout_ms: 15_000, health_interval_ms: 100 },
  });
}

/** Start a herd in a child process, wait until its engine is ready, SIGKILL the herd. Returns the engine pid. */
async function herdThatDies(config: Config): Promise<number> {
  const path = join(config.node.data_dir, "config.json");
  writeFileSync(path, JSON.stringify(config));
  const herd = Bun.spawn([process.execPath, SUPERVISE, path], { stdout: "pipe", stderr: "ignore", stdin: "ignore" });
  try {
    // supervise.ts prints one line once every engine is ready.
    const reader = herd.stdout.getReader();
    const first = await Promise.race([reader.read(), Bun.sleep(20_000).then(() => null)]);
    expect(first?.value, "the first herd never reported ready").toBeDefined();
    expect(new TextDecoder().decode(first!.value)).toContain(`"ready"`);
  } finally {
    herd.kill("SIGKILL");
    await herd.exited;
  }
  const rec = new EngineRecordFile(join(config.node.data_dir, "run", "engines.json")).load();
  expect(rec.map((r) => r.worker)).toEqual([ID]);
  killed.push(rec[0]!.pid);
  return rec[0]!.pid;
}

async function chat(url: string): Promise<number> {
  const res = await fetch(`${url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "sim-model", messages: [{ role: "user", content: "hi" }], max_tokens: 2 }),
  });
  await res.arrayBuffer();
  return res.status;
}

describe("recover", () => {
  test("the same engine in the new plan is adopted: same pid and URL, ready, serving, stopped by the new herd", async () => {
    const config = simConfig(tempDir("herd-recover-"));
    const pid = await herdThatDies(config);
    expect(isRunning(pid)).toBe(true);

    const logger = memoryLogger();
    sup = new Supervisor({ config, clock: new RealClock(), logger });
    await sup.start();
    const w = await sup.waitFor(ID, ["ready"], 10_000);
    expect(sup.status()[0]!.pid).toBe(pid);
    expect(w.restarts).toBe(0);
    expect(logger.lines.some((l) => l.includes("engine adopted from the previous herd") && l.includes(`pid=${pid}`))).toBe(true);
    expect(await chat(w.url)).toBe(200);
    // Still recorded as this herd's engine, so a third herd can adopt or reap it in turn.
    expect(new EngineRecordFile(join(config.node.data_dir, "run", "engines.json")).load().map((r) => r.pid)).toEqual([pid]);

    await sup.stop({ drainMs: 0 });
    sup = null;
    expect(isRunning(pid)).toBe(false);
  }, 60_000);

  test("a changed plan (other env, hence another launch hash) terminates the old engine and starts a new one", async () => {
    const dataDir = tempDir("herd-recover-");
    const pid = await herdThatDies(simConfig(dataDir));
    sup = new Supervisor({ config: simConfig(dataDir, { HERD_TEST: "changed" }), clock: new RealClock(), logger: memoryLogger() });
    await sup.start();
    expect(isRunning(pid)).toBe(false);
    await sup.waitFor(ID, ["ready"], 15_000);
    expect(sup.status()[0]!.pid).not.toBe(pid);
  }, 60_000);

  test("an engine that matches but fails its health check (SIGSTOPped) is terminated, not adopted", async () => {
    const config = simConfig(tempDir("herd-recover-"));
    const pid = await herdThatDies(config);
    process.kill(pid, "SIGSTOP");
    sup = new Supervisor({ config, clock: new RealClock(), logger: memoryLogger() });
    await sup.start();
    expect(isRunning(pid)).toBe(false);
    await sup.waitFor(ID, ["ready"], 15_000);
    expect(sup.status()[0]!.pid).not.toBe(pid);
  }, 60_000);
});
