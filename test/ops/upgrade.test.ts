// Upgrades and crashes of `herd run` itself (not just the Supervisor class): a service restart
// (SIGTERM, the binary replaced, start again) leaves nothing behind; a herd killed with SIGKILL leaves
// its sim engines running, and the next `herd run` on the same data_dir finds them through
// data_dir/run/engines.json, terminates them, and starts fresh engines on the same ports.
import { afterAll, expect, test } from "bun:test";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { isRunning } from "../../src/engine/procfs.ts";
import { cleanup, herdCli, simConfigYaml, startHerd, tempDir, until, type HerdProc } from "./helpers.ts";

const dir = tempDir("herd-upgrade-");
// HERD_SUPERVISOR_PID="" turns off the sim engines' own parent watchdog, so they linger after a
// SIGKILL the way real engines (vLLM, SGLang) do and the next start's sweep is what is tested.
const yaml = simConfigYaml({ dir, node: "up", count: 2, simArgs: ["--time-scale", "50", "--output-len", "4"], env: { HERD_SUPERVISOR_PID: "" } });
const started: HerdProc[] = [];
let strays: number[] = [];

afterAll(async () => {
  for (const h of started) await h.stop();
  for (const pid of strays) if (isRunning(pid)) process.kill(pid, "SIGKILL");
  cleanup(dir);
});

async function run(): Promise<HerdProc> {
  const h = await startHerd(dir, yaml);
  started.push(h);
  return h;
}

async function readyPids(h: HerdProc): Promise<number[]> {
  let pids: number[] = [];
  await until("both workers ready", async () => {
    const r = await herdCli(["status", "--json", "--url", h.url]);
    if (r.code !== 0) return false;
    const ws = JSON.parse(r.out).workers as { state: string; pid: number | null }[];
    pids = ws.map((w) => w.pid ?? 0);
    return ws.length === 2 && ws.every((w) => w.state === "ready");
  }, 15_000);
  return pids;
}

const recorded = () => JSON.parse(readFileSync(join(dir, "data", "run", "engines.json"), "utf8")).engines as { pid: number }[];

async function served(h: HerdProc): Promise<void> {
  const r = await fetch(`${h.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "up-sim", prompt: "hi", max_tokens: 4 }) });
  expect(r.status).toBe(200);
  await r.text();
}

test("a service restart (SIGTERM, start again) stops the engines and leaves nothing to clean up", async () => {
  const a = await run();
  const pids = await readyPids(a);
  expect(recorded().map((r) => r.pid).sort()).toEqual([...pids].sort());
  a.proc.kill("SIGTERM");
  expect(await a.proc.exited).toBe(0);
  for (const pid of pids) expect(isRunning(pid)).toBe(false);
  expect(recorded()).toEqual([]);

  const b = await run();
  await readyPids(b);
  expect(b.log()).not.toContain("left running by a previous herd");
  await served(b);
  b.proc.kill("SIGTERM");
  expect(await b.proc.exited).toBe(0);
}, 40_000);

// Issue 9 (recover): the next herd adopts the engines a SIGKILLed herd left, when its plan has the
// very same engines and they still answer /health, instead of terminating them (before issue 9 it
// terminated them; the kill path is covered in test/engine/orphans.test.ts and recover.test.ts).
test("after `herd run` is SIGKILLed, the next `herd run` adopts the healthy engines it left and serves again", async () => {
  const a = await run();
  const old = await readyPids(a);
  strays = old;
  a.proc.kill("SIGKILL");
  await a.proc.exited;
  // herd is gone; its engines (own sessions) are not, and the record still names them.
  for (const pid of old) expect(isRunning(pid)).toBe(true);
  expect(recorded().map((r) => r.pid).sort()).toEqual([...old].sort());

  const b = await run();
  const adopted = await readyPids(b);
  expect([...adopted].sort()).toEqual([...old].sort());
  const log = b.log();
  for (const pid of old) expect(log).toMatch(new RegExp(`engine adopted from the previous herd worker=up/sim-\\d pid=${pid}`));
  expect(log).toContain("checked engines recorded by the previous herd recorded=2 adopted=2 terminated=0");
  await served(b);
  expect(recorded().map((r) => r.pid).sort()).toEqual([...old].sort());
  b.proc.kill("SIGTERM");
  expect(await b.proc.exited).toBe(0);
  // The adopting herd stops them like its own.
  for (const pid of old) expect(isRunning(pid)).toBe(false);
  expect(recorded()).toEqual([]);
}, 40_000);

test("sim engines whose herd was SIGKILLed stop by themselves (parent watchdog)", async () => {
  const wdir = tempDir("herd-watchdog-");
  try {
    const h = await startHerd(wdir, simConfigYaml({ dir: wdir, node: "wd", count: 2, simArgs: ["--time-scale", "50"] }));
    started.push(h);
    const pids = await readyPids(h);
    strays.push(...pids);
    h.proc.kill("SIGKILL");
    await h.proc.exited;
    await until("engines gone", async () => pids.every((pid) => !isRunning(pid)), 10_000);
  } finally {
    cleanup(wdir);
  }
}, 40_000);
