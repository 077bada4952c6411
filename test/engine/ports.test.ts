// Ports herd plans never collide across herds on one host (port-leases.ts), and a crashing engine
// carries its cause: the last error line of its output, or a planned port lost between planning and
// bind (port-check.ts, logtail.ts lastErrorLine, the machine's lastError, the supervisor).
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { lastErrorLine } from "../../src/engine/logtail.ts";
import { initialState, transition, type MachinePolicy } from "../../src/engine/machine.ts";
import { canListen, planEngines } from "../../src/engine/plan.ts";
import { lostPorts } from "../../src/engine/port-check.ts";
import { PortLeases, type LeaseOwner } from "../../src/engine/port-leases.ts";
import { Supervisor } from "../../src/engine/supervisor.ts";
import { engine, fakeCommand, randomPortStart, testConfig } from "../fixtures/engines/config.ts";

const dirs: string[] = [];
const sups: Supervisor[] = [];
afterEach(async () => {
  await Promise.all(sups.splice(0).map((s) => s.stop({ drainMs: 0 })));
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});
const leaseDir = () => {
  const d = mkdtempSync(join(tmpdir(), "herd-leases-"));
  dirs.push(d);
  return join(d, "ports");
};

describe("port leases", () => {
  test("a port one live herd leases is refused to another; a dead owner's lease is taken over; release removes only ours", () => {
    const dir = leaseDir();
    const live = new Set<number>([1, 2]);
    const alive = (o: LeaseOwner) => live.has(o.pid);
    const a = new PortLeases(dir, { pid: 1, startTicks: 10 }, alive);
    const b = new PortLeases(dir, { pid: 2, startTicks: 20 }, alive);
    expect(a.problem).toBeNull();
    expect(a.claim(20000)).toBe(true);
    expect(a.claim(20000)).toBe(true); // already ours
    expect(b.claim(20000)).toBe(false);
    expect(b.holder(20000)).toEqual({ pid: 1, startTicks: 10, instance: 0 });
    expect(a.holder(20000)).toBeNull(); // not "another" herd
    expect(b.claim(20001)).toBe(true);
    expect([...a.list().keys()].sort()).toEqual([20000, 20001]);
    live.delete(1); // herd 1 died without releasing
    expect(b.holder(20000)).toBeNull();
    expect(b.claim(20000)).toBe(true);
    a.release(); // its lease file is b's now: left alone
    expect(readdirSync(dir).sort()).toEqual(["20000", "20001"]);
    b.release([20001]);
    expect(readdirSync(dir)).toEqual(["20000"]);
    expect(b.held()).toEqual([20000]);
  });

  test("two supervisors in one process lease apart (one instance each)", () => {
    const dir = leaseDir();
    const a = new PortLeases(dir);
    const b = new PortLeases(dir);
    expect(a.claim(31000)).toBe(true);
    expect(b.claim(31000)).toBe(false);
    expect(b.holder(31000)?.pid).toBe(process.pid);
    a.release();
    expect(b.claim(31000)).toBe(true);
  });

  test("a recycled pid (other start time) does not keep a lease alive", () => {
    const dir = leaseDir();
    const a = new PortLeases(dir, { pid: process.pid, startTicks: 1 }); // this pid, but not this process's start time
    const b = new PortLeases(dir, { pid: 999_999_999, startTicks: 5 });
    expect(a.claim(30000)).toBe(true);
    expect(b.claim(30000)).toBe(true);
  });

  test("two planners over one host's leases plan disjoint ports, though every port binds", () => {
    const dir = leaseDir();
    const start = randomPortStart();
    const config = (name: string) => {
      const c = testConfig({ engines: [engine({ kind: "sim", count: 3 })], supervisor: { port_range_start: start } });
      return { ...c, node: { ...c.node, name } };
    };
    const plan = (name: string, pid: number) => {
      const leases = new PortLeases(dir, { pid, startTicks: pid }, () => true);
      return planEngines(config(name), { self: ["herd"], hostGpus: { ids: [], source: "none" }, isPortFree: (_h, p) => leases.claim(p) });
    };
    const ports = (ps: ReturnType<typeof plan>) => ps.flatMap((p) => [p.spec!.port, ...[p.kvEvents!.endpoint, p.kvEvents!.replayEndpoint!].map((e) => Number(/:(\d+)$/.exec(e)![1]))]);
    const a = ports(plan("a", 11));
    const b = ports(plan("b", 12));
    expect(a.length).toBe(9);
    expect(new Set([...a, ...b]).size).toBe(18);
    expect(Math.min(...b)).toBe(start + 9);
  });

  test("an unwritable lease directory turns leases off (claims succeed, the problem is named)", () => {
    const d = leaseDir();
    const file = join(d, "..", "not-a-dir");
    Bun.write(file, "x");
    const l = new PortLeases(join(file, "ports"));
    expect(l.problem).toContain("cannot use");
    expect(l.claim(1234)).toBe(true);
    expect(l.holder(1234)).toBeNull();
  });
});

describe("the cause of a crash", () => {
  test("lastErrorLine: the exception after a traceback, not herd's markers, only from the last run", () => {
    expect(lastErrorLine([])).toBeNull();
    expect(lastErrorLine(["[herd: started x pid 1]", "[herd: pid 1 exited with code 1]"])).toBeNull();
    expect(
      lastErrorLine([
        "[herd: started x pid 1]",
        "INFO loading",
        "Traceback (most recent call last):",
        '  File "/usr/lib/vllm/engine.py", line 12, in run',
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "[herd: pid 1 exited with code 1]",
      ]),
    ).toBe("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB");
    // No error-looking line: the last line the engine printed.
    expect(lastErrorLine(["[herd: started x pid 1]", "INFO a", "INFO b", "[herd: pid 1 exited with code 1]"])).toBe("INFO b");
    // An older run's error is not this one's.
    expect(lastErrorLine(["ERROR old", "[herd: pid 1 exited with code 1]", "[herd: started x pid 2]", "INFO fine"])).toBe("INFO fine");
    expect(lastErrorLine(["x".repeat(1000) + " error"])!.length).toBe(300);
  });

  test("lostPorts: a taken port is blamed only when the error is about binding or names it", () => {
    const checks = [{ port: 20000, host: "127.0.0.1" }, { port: 20001, host: "0.0.0.0" }];
    const taken = (c: { port: number }) => c.port !== 20001;
    const noLease = () => null;
    expect(lostPorts(checks, "RuntimeError: CUDA out of memory", () => false, noLease)).toBeNull();
    const lost = lostPorts(checks, "zmtp PUB: cannot bind tcp://127.0.0.1:20001: EADDRINUSE", (c) => c.port !== 20001, noLease);
    expect(lost).toEqual({ port: 20001, holder: null, message: "port 20001 was taken between planning and bind (another process holds it): zmtp PUB: cannot bind tcp://127.0.0.1:20001: EADDRINUSE" });
    expect(lostPorts(checks, "OSError: [Errno 98] Address already in use", taken, () => 4242)!.message).toContain("another herd on this host (pid 4242) leases it");
    // Every port binds again (both racing engines died): nothing to blame, the error line says it.
    expect(lostPorts(checks, "cannot bind 20001", () => true, noLease)).toBeNull();
  });

  test("the machine keeps the cause on the engine-down log line and drops it once ready", () => {
    const p: MachinePolicy = { health_interval_ms: 100, startup_timeout_ms: 1000, unhealthy_threshold: 2, restart_backoff_initial_ms: 10, restart_backoff_max_ms: 100, max_restarts: 1, restart_reset_ms: 1000, stop_timeout_ms: 100, managed: true };
    let s = transition(initialState(), { type: "start" }, p, 0).state;
    const down = transition(s, { type: "exited", code: 1, signal: null, lastError: "ValueError: bad flag" }, p, 5);
    expect(down.state.lastError).toBe("ValueError: bad flag");
    const line = down.effects.find((e) => e.t === "log" && e.msg.startsWith("engine down"));
    expect(line).toMatchObject({ level: "warn", fields: { last_error: "ValueError: bad flag", reason: "exited with code 1 while starting" } });
    s = transition(down.state, { type: "timer", name: "backoff" }, p, 20).state;
    const failed = transition(s, { type: "exited", code: 1, signal: null, lastError: "ValueError: still bad" }, p, 30);
    expect(failed.state.phase).toBe("failed");
    expect(failed.effects.find((e) => e.t === "log" && e.msg === "engine failed")).toMatchObject({ fields: { last_error: "ValueError: still bad" } });
    // A ready engine has no current cause.
    let r = transition(initialState(), { type: "start" }, p, 0).state;
    r = transition(r, { type: "exited", code: 1, signal: null, lastError: "boom error" }, p, 1).state;
    r = transition(r, { type: "timer", name: "backoff" }, p, 20).state;
    r = transition(r, { type: "probed", gen: r.gen, ok: true }, p, 30).state;
    expect(r.phase).toBe("ready");
    expect(r.lastError).toBeNull();
    // A stop's exit carries no cause.
    const stopped = transition(transition(r, { type: "stop", drainMs: 0 }, p, 40).state, { type: "exited", code: 0, signal: null, lastError: "INFO bye" }, p, 50).state;
    expect(stopped.lastError).toBeNull();
  });
});

describe("supervisor", () => {
  const clock = new RealClock();

  test("a crash-looping engine's last error line is in status(), lastError() and the engine-down line", async () => {
    const script = "echo 'INFO starting'; echo 'ValueError: --max-model-len 99999 exceeds the model maximum 40960' >&2; exit 1";
    const config = testConfig({ engines: [engine({ kind: "command", command: ["sh", "-c", script] })], supervisor: { restart_backoff_initial_ms: 50, max_restarts: 2 } });
    const logger = memoryLogger();
    const sup = new Supervisor({ config, clock, logger, leases: new PortLeases(leaseDir()) });
    sups.push(sup);
    await sup.start();
    await sup.waitFor("n1/command-0", ["failed"], 10_000);
    const cause = "ValueError: --max-model-len 99999 exceeds the model maximum 40960";
    expect(sup.lastError("n1/command-0")).toBe(cause);
    expect(sup.status()[0]!.lastError).toBe(cause);
    const down = logger.lines.find((l) => l.includes("engine down"))!;
    expect(down).toContain("last_error=");
    expect(down).toContain("exceeds the model maximum");
    expect(logger.lines.find((l) => l.includes("engine failed"))).toContain("exceeds the model maximum");
  }, 20_000);

  test("a port taken between planning and bind is reported as such", async () => {
    const start = randomPortStart();
    let planning = true;
    // Planning sees every port free; afterwards the real probe decides (the test holds the port).
    const isPortFree = (h: string, p: number) => planning || canListen(h, p);
    const config = testConfig({ engines: [engine({ kind: "command", command: fakeCommand() })], supervisor: { port_range_start: start, restart_backoff_initial_ms: 50, max_restarts: 1 } });
    const sup = new Supervisor({ config, clock, logger: memoryLogger(), plan: { isPortFree } });
    sups.push(sup);
    let thief: ReturnType<typeof Bun.serve> | null = null;
    try {
      thief = Bun.serve({ hostname: "127.0.0.1", port: start, fetch: () => new Response("not yours") });
      await sup.start();
      planning = false;
      expect(sup.plans()[0]!.spec!.port).toBe(start);
      await sup.waitFor("n1/command-0", ["failed"], 10_000);
      expect(sup.lastError("n1/command-0")).toStartWith(`port ${start} was taken between planning and bind (another process holds it)`);
    } finally {
      await thief?.stop(true);
    }
  }, 20_000);

  test("stop() releases this herd's leases", async () => {
    const dir = leaseDir();
    const config = testConfig({ engines: [engine({ kind: "command", command: fakeCommand() })], supervisor: { port_range_start: randomPortStart() } });
    const sup = new Supervisor({ config, clock, logger: memoryLogger(), leases: new PortLeases(dir) });
    await sup.start();
    await sup.waitFor("n1/command-0", ["ready"], 10_000);
    expect(readdirSync(dir)).toEqual([String(sup.plans()[0]!.spec!.port)]);
    await sup.stop({ drainMs: 0 });
    expect(existsSync(dir) ? readdirSync(dir) : []).toEqual([]);
  }, 20_000);
});
