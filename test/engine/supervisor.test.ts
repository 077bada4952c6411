// The supervisor with real child processes: the fake engine (test/fixtures/engines/fake-engine.ts)
// started through kind `command`, on the real clock with short timings.
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Worker } from "../../src/workers/worker.ts";
import { RealClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { isRunning } from "../../src/engine/procfs.ts";
import { Supervisor } from "../../src/engine/supervisor.ts";
import { engine, fakeCommand, testConfig } from "../fixtures/engines/config.ts";
import type { Config } from "../../src/config/types.ts";

const clock = new RealClock();
const running: Supervisor[] = [];

afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.stop({ drainMs: 0 })));
});

function supervise(config: Config, inFlight?: (id: string) => number) {
  const logger = memoryLogger();
  const changes: Worker[] = [];
  const sup = new Supervisor({ config, clock, logger, onChange: (w) => changes.push(w), ...(inFlight ? { inFlight } : {}) });
  running.push(sup);
  return { sup, logger, changes };
}

async function until(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(20);
  }
}

const pidOf = (sup: Supervisor, id: string) => sup.status().find((s) => s.worker.id === id)!.pid!;

describe("supervisor with fake engines", () => {
  test("issue 22: the engine's argv in the log has secret flags redacted", async () => {
    const config = testConfig({ engines: [engine({ kind: "command", count: 1, command: fakeCommand("--api-key", "sk-never-logged-123", "--quiet") })] });
    const { sup, logger } = supervise(config);
    await sup.start();
    await sup.waitFor("n1/command-0", ["ready"], 5_000);
    const line = logger.lines.find((l) => l.includes("engine") && l.includes("--api-key"));
    expect(line).toContain("--api-key <redacted>");
    expect(logger.lines.join("\n")).not.toContain("sk-never-logged-123");
  });

  test("starts engines, waits for /health, captures output and env, stops them", async () => {
    const config = testConfig({
      engines: [engine({ kind: "command", count: 2, gpus: [4, 5], env: { FAKE_TAG: "t1" }, command: fakeCommand("--slow-start-ms", "300", "--lines", "80") })],
      supervisor: { python_hash_seed: 42, log_tail_lines: 20 },
    });
    const { sup, changes } = supervise(config);
    await sup.start();
    expect(sup.list().map((w) => w.state)).toEqual(["starting", "starting"]);
    const t0 = Date.now();
    const ready = await Promise.all(["n1/command-0", "n1/command-1"].map((id) => sup.waitFor(id, ["ready"], 5_000)));
    // Slow start: the port refuses connections for 300 ms, so readiness cannot come earlier.
    expect(Date.now() - t0).toBeGreaterThanOrEqual(250);
    expect(ready.map((w) => w.url)).toEqual(sup.status().map((s) => s.plan.url));
    expect(changes.filter((w) => w.state === "ready").length).toBe(2);

    const lines = sup.logs("n1/command-0");
    expect(lines.length).toBe(20); // bounded ring, the last lines only
    const all = readFileSync(join(config.node.data_dir, "logs", "n1_command-0.log"), "utf8");
    expect(all).toContain("fake-engine pid");
    expect(all).toContain("fake-engine stderr line");
    expect(all).toContain("line 79");
    expect(all).toMatch(/CUDA_VISIBLE_DEVICES=4 PYTHONHASHSEED=42 FAKE_TAG=t1/);
    expect(readFileSync(join(config.node.data_dir, "logs", "n1_command-1.log"), "utf8")).toMatch(/CUDA_VISIBLE_DEVICES=5 PYTHONHASHSEED=42/);

    const record = JSON.parse(readFileSync(join(config.node.data_dir, "run", "engines.json"), "utf8"));
    expect(record.engines.map((r: { worker: string }) => r.worker).sort()).toEqual(["n1/command-0", "n1/command-1"]);

    const pids = sup.status().map((s) => s.pid!);
    await sup.stop({ drainMs: 0 });
    expect(sup.list().map((w) => w.state)).toEqual(["stopped", "stopped"]);
    expect(pids.some(isRunning)).toBe(false);
    expect(JSON.parse(readFileSync(join(config.node.data_dir, "run", "engines.json"), "utf8")).engines).toEqual([]);
    expect(sup.logs("n1/command-0").at(-1)).toMatch(/exited with code 0/);
  }, 20_000);

  test("a crashing engine is restarted with backoff and ends in failed", async () => {
    const config = testConfig({
      engines: [engine({ kind: "command", command: fakeCommand("--crash-after-ms", "150") })],
      supervisor: { restart_backoff_initial_ms: 100, restart_backoff_max_ms: 200, max_restarts: 2 },
    });
    const { sup, changes, logger } = supervise(config);
    await sup.start();
    const w = await sup.waitFor("n1/command-0", ["failed"], 8_000);
    expect(w.restarts).toBe(2);
    expect(changes.map((c) => c.state)).toContain("ready");
    expect(logger.lines.some((l) => l.includes("engine failed"))).toBe(true);
    expect(sup.status()[0]!.lastExit).toEqual({ code: 3, signal: null });
    expect(sup.logs("n1/command-0").filter((l) => l.includes("crashing on purpose")).length).toBe(3);
    sup.restart("n1/command-0"); // a manual restart gives a failed worker a fresh start
    await sup.waitFor("n1/command-0", ["ready"], 5_000);
  }, 20_000);

  test("an engine never healthy is killed at the startup timeout and restarted", async () => {
    const config = testConfig({
      engines: [engine({ kind: "command", command: fakeCommand("--never-healthy") })],
      supervisor: { startup_timeout_ms: 400, restart_backoff_initial_ms: 50 },
    });
    const { sup } = supervise(config);
    await sup.start();
    const firstPid = pidOf(sup, "n1/command-0");
    await until(() => sup.list()[0]!.restarts >= 1, 5_000, "a restart");
    expect(isRunning(firstPid)).toBe(false);
    expect(sup.logs("n1/command-0").join("\n")).toContain("got SIGTERM");
    expect(sup.list()[0]!.state).toBe("starting");
  }, 20_000);

  test("a SIGSTOPped engine leaves rotation and returns after SIGCONT", async () => {
    const config = testConfig({ engines: [engine({ kind: "command", command: fakeCommand() })] });
    const { sup } = supervise(config);
    await sup.start();
    await sup.waitFor("n1/command-0", ["ready"], 5_000);
    const pid = pidOf(sup, "n1/command-0");
    process.kill(pid, "SIGSTOP");
    try {
      const t0 = Date.now();
      await sup.waitFor("n1/command-0", ["starting"], 5_000);
      // threshold 2 × (interval 50 + timeout 200) ≈ 500 ms; generous for a loaded CI box
      expect(Date.now() - t0).toBeLessThan(4_000);
      expect(sup.status()[0]!.phase).toBe("unhealthy");
    } finally {
      process.kill(pid, "SIGCONT");
    }
    await sup.waitFor("n1/command-0", ["ready"], 3_000);
    expect(pidOf(sup, "n1/command-0")).toBe(pid); // not restarted
  }, 20_000);

  test("stop drains in-flight work first, then SIGTERM, then SIGKILL for the whole group", async () => {
    const config = testConfig({
      engines: [engine({ kind: "command", command: fakeCommand("--ignore-sigterm", "--child") })],
      supervisor: { stop_timeout_ms: 300 },
    });
    let inFlight = 1;
    const { sup } = supervise(config, () => inFlight);
    await sup.start();
    await sup.waitFor("n1/command-0", ["ready"], 5_000);
    await until(() => sup.logs("n1/command-0").some((l) => l.includes("fake-engine child ")), 2_000, "the child pid");
    const childPid = Number(/child (\d+)/.exec(sup.logs("n1/command-0").find((l) => l.includes("fake-engine child "))!)![1]);
    const pid = pidOf(sup, "n1/command-0");
    const t0 = Date.now();
    const stopped = sup.stop({ drainMs: 5_000 });
    expect(sup.list()[0]!.state).toBe("draining");
    await Bun.sleep(300);
    expect(sup.logs("n1/command-0").join("\n")).not.toContain("ignoring SIGTERM"); // still draining
    inFlight = 0;
    await stopped;
    const tookMs = Date.now() - t0;
    expect(tookMs).toBeGreaterThanOrEqual(300 + 300); // drain, then the SIGKILL grace
    expect(tookMs).toBeLessThan(5_000);
    expect(sup.logs("n1/command-0").join("\n")).toContain("ignoring SIGTERM");
    expect(sup.status()[0]!.lastExit?.signal).toBe("SIGKILL");
    expect(isRunning(pid)).toBe(false);
    await until(() => !isRunning(childPid), 2_000, "the child to die with its group");
  }, 20_000);

  test("an external engine gets health polling and a worker record but no process", async () => {
    const port = 20_000 + Math.floor(Math.random() * 30_000);
    const server = Bun.serve({ hostname: "127.0.0.1", port, fetch: () => new Response(null, { status: 200 }) });
    try {
      const config = testConfig({ engines: [engine({ kind: "external", url: `http://127.0.0.1:${server.port}` })] });
      const { sup } = supervise(config);
      await sup.start();
      const w = await sup.waitFor("n1/external-0", ["ready"], 3_000);
      expect(w.kind).toBe("external");
      expect(sup.status()[0]!.pid).toBeNull();
      expect(existsSync(join(config.node.data_dir, "logs"))).toBe(false);
      server.stop(true);
      await sup.waitFor("n1/external-0", ["starting"], 3_000);
    } finally {
      server.stop(true);
    }
  }, 20_000);

  test("unknown worker ids are a 404 HerdError; a spawn failure backs off instead of throwing", async () => {
    const config = testConfig({
      engines: [engine({ kind: "command", command: ["/nonexistent/engine-binary"] })],
      supervisor: { max_restarts: 1, restart_backoff_initial_ms: 50 },
    });
    const { sup } = supervise(config);
    await sup.start();
    expect(() => sup.logs("nope")).toThrow(/no worker/);
    await sup.waitFor("n1/command-0", ["failed"], 3_000);
  }, 20_000);
});
