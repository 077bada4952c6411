// Issue 6: engines must not outlive a herd that was SIGKILLed. The next start finds and stops them.
import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { EngineRecordFile, leftoversOf, recordFor } from "../../src/engine/orphans.ts";
import { isRunning, parseStat, readCmdline, readStat } from "../../src/engine/procfs.ts";
import { Supervisor } from "../../src/engine/supervisor.ts";
import { engine, fakeCommand, tempDir, testConfig } from "../fixtures/engines/config.ts";

const SUPERVISE = resolve(import.meta.dir, "../fixtures/engines/supervise.ts");

async function until(cond: () => boolean, timeoutMs: number, what: string): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(20);
  }
}

async function firstLine(stream: ReadableStream<Uint8Array>, timeoutMs: number): Promise<string> {
  const reader = stream.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  const timeout = Bun.sleep(timeoutMs).then(() => {
    throw new Error(`no line within ${timeoutMs} ms`);
  });
  while (!buf.includes("\n")) {
    const r = await Promise.race([reader.read(), timeout]);
    if (r.done) throw new Error(`stream ended: ${buf}`);
    buf += decoder.decode(r.value, { stream: true });
  }
  reader.releaseLock();
  return buf.slice(0, buf.indexOf("\n"));
}

describe("orphans", () => {
  // Issue 9 changed this: the same engine in the new plan is adopted (recover.test.ts); an engine the
  // new config no longer asks for (here: another env) is still terminated.
  test("after herd is SIGKILLed, the next start terminates the engines it left running that the new plan does not match", async () => {
    const dataDir = tempDir("herd-orphan-");
    const config = testConfig({
      dataDir,
      engines: [engine({ kind: "command", command: fakeCommand("--quiet", "--child") })],
      supervisor: { stop_timeout_ms: 1_000 },
    });
    const cfgPath = join(dataDir, "config.json");
    writeFileSync(cfgPath, JSON.stringify(config));
    const herd = Bun.spawn([process.execPath, SUPERVISE, cfgPath], { stdout: "pipe", stderr: "ignore", stdin: "ignore" });
    let enginePid = 0;
    let childPid = 0;
    try {
      const ready = JSON.parse(await firstLine(herd.stdout, 10_000)) as { ready: { id: string; pid: number }[] };
      enginePid = ready.ready[0]!.pid;
      const log = readFileSync(join(dataDir, "logs", "n1_command-0.log"), "utf8");
      childPid = Number(/fake-engine child (\d+)/.exec(log)?.[1]);
      expect(childPid).toBeGreaterThan(1);
    } finally {
      herd.kill("SIGKILL");
      await herd.exited;
    }
    // The herd is gone; its engine and the engine's child are not.
    expect(isRunning(enginePid)).toBe(true);
    expect(isRunning(childPid)).toBe(true);
    const recorded = new EngineRecordFile(join(dataDir, "run", "engines.json")).load();
    expect(recorded.map((r) => r.pid)).toEqual([enginePid]);

    const logger = memoryLogger();
    const changed = { ...config, engines: [{ ...config.engines[0]!, env: { HERD_TEST_CHANGED: "1" } }] };
    const next = new Supervisor({ config: changed, clock: new RealClock(), logger });
    try {
      await next.start();
      expect(isRunning(enginePid)).toBe(false);
      await until(() => !isRunning(childPid), 2_000, "the leftover engine's child to die");
      const found = logger.lines.find((l) => l.includes("left running by a previous herd"));
      expect(found).toContain(`pid=${enginePid}`);
      await next.waitFor("n1/command-0", ["ready"], 10_000);
      expect(next.status()[0]!.pid).not.toBe(enginePid);
    } finally {
      await next.stop({ drainMs: 0 });
    }
    expect(new EngineRecordFile(join(dataDir, "run", "engines.json")).load()).toEqual([]);
  }, 30_000);

  test("refuses to start while the herd that wrote the record is still running", async () => {
    const dataDir = tempDir("herd-owner-");
    const path = join(dataDir, "run", "engines.json");
    new EngineRecordFile(path).save([]);
    const other = Bun.spawn(["sleep", "30"], { stdio: ["ignore", "ignore", "ignore"] });
    try {
      const file = JSON.parse(readFileSync(path, "utf8"));
      file.herd = { ...file.herd, pid: other.pid, startTicks: readStat(other.pid)!.startTicks };
      writeFileSync(path, JSON.stringify(file));
      const config = testConfig({ dataDir, engines: [engine({ kind: "command", command: fakeCommand() })] });
      const sup = new Supervisor({ config, clock: new RealClock(), logger: memoryLogger() });
      await expect(sup.start()).rejects.toThrow(/another herd \(pid \d+\) is running/);
      expect(sup.list()).toEqual([]);
    } finally {
      other.kill("SIGKILL");
      await other.exited;
    }
    // Once that herd is gone, the same data_dir starts normally.
    const config = testConfig({ dataDir, engines: [] });
    const sup = new Supervisor({ config, clock: new RealClock(), logger: memoryLogger() });
    await sup.start();
    await sup.stop({ drainMs: 0 });
  });

  test("a recorded pid now used by another process is left alone", () => {
    const me = recordFor("n1/x-0", process.pid, new Date().toISOString());
    expect(me.startTicks).toBe(readStat(process.pid)!.startTicks);
    expect(me.cmdline).toEqual(readCmdline(process.pid)!);
    // Same pid, but a different start time and command line: pid reuse, not our engine.
    expect(leftoversOf({ ...me, startTicks: me.startTicks + 1, cmdline: ["vllm", "serve", "x"] })).toEqual([]);
    // A dead pid yields nothing either.
    expect(leftoversOf({ ...me, pid: 2 ** 22 + 12345, pgid: 2 ** 22 + 12345 })).toEqual([]);
    // A record from another boot is ignored outright.
    expect(leftoversOf({ ...me, bootId: "another-boot" })).toEqual([]);
    // Sanity: the real identity does match (without signalling anything).
    expect(leftoversOf(me).map((p) => p.pid)).toContain(process.pid);
  });

  test("/proc stat parsing survives spaces and parentheses in the command name", () => {
    const text = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1000 10";
    expect(parseStat(text)).toEqual({ pid: 4242, state: "S", ppid: 1, pgrp: 4242, session: 4242, startTicks: 987654 });
    expect(parseStat("garbage")).toBeNull();
  });
});

describe("reapLeftovers runs on the injected clock", () => {
  test("a leftover that ignores SIGTERM is SIGKILLed once the clock passes stop_timeout_ms (a minute, here instantly)", async () => {
    const { reapLeftovers } = await import("../../src/engine/orphans.ts");
    const stubborn = Bun.spawn(["bash", "-c", 'trap "" TERM; sleep 30 & wait'], { stdio: ["ignore", "ignore", "ignore"], detached: true });
    await until(() => (readCmdline(stubborn.pid) ?? []).length > 0, 2_000, "bash to start");
    await Bun.sleep(100); // let it install the trap and start its child
    const rec = recordFor("n1/stubborn-0", stubborn.pid, "2026-01-01T00:00:00Z");
    // Each sleep advances this clock by 10 s: the 60 s SIGTERM grace is over after 6 polls.
    let now = 0;
    const sleeps: number[] = [];
    const clock = { now: () => now, setTimer: () => ({ cancel() {} }), sleep: async (ms: number) => { sleeps.push(ms); now += 10_000; await Bun.sleep(1); } };
    const logger = memoryLogger();
    const t0 = performance.now();
    const reaped = await reapLeftovers([rec], { stopTimeoutMs: 60_000, logger, clock });
    expect(performance.now() - t0).toBeLessThan(10_000); // safety bound: no real minute was waited
    expect(reaped.map((r) => r.pid)).toEqual([stubborn.pid]);
    expect(logger.lines.some((l) => l.includes("ignored SIGTERM; sending SIGKILL"))).toBe(true);
    expect(sleeps.slice(0, 6)).toEqual([50, 50, 50, 50, 50, 50]);
    await stubborn.exited;
    expect(stubborn.signalCode).toBe("SIGKILL");
  });
});
