// `herd bench` pointed at a herd (not an engine): herd has no /reset_prefix_cache, so the reset
// before each level goes to every engine behind it (found through GET /admin/cluster), and each
// level's first request finds a cold cache; with --reset-prefix-cache false the second level is warm.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { type BenchIo, benchMain } from "../../src/bench/cli.ts";
import { defaultConfig } from "../../src/config/load.ts";
import { memoryLogger } from "../helpers/log.ts";
import { startDaemon, type Daemon } from "../../src/daemon/daemon.ts";
import type { BenchResult } from "../../src/workload/report.ts";
import { cleanup, portBase, tempDir } from "../helpers/herd.ts";

const dir = tempDir("herd-bench-reset-");
let daemon: Daemon;

beforeAll(async () => {
  const config = defaultConfig({ hostname: "bench-reset", dataDir: join(dir, "data") });
  config.frontend.listen = "127.0.0.1:0";
  config.engines = [{ ...config.engines[0]!, count: 2, args: ["--time-scale", "50"] }];
  config.supervisor.port_range_start = portBase();
  config.supervisor.health_interval_ms = 100;
  daemon = await startDaemon(config, { configPath: null, logger: memoryLogger() });
  await Promise.race([daemon.firstReady, Bun.sleep(20_000).then(() => Promise.reject(new Error("no worker became ready")))]);
  // Both engines ready, so the reset reaches both.
  for (let i = 0; i < 200 && daemon.registry.list().some((w) => w.state !== "ready"); i++) await Bun.sleep(50);
}, 30_000);

afterAll(async () => {
  await daemon?.shutdown(true);
  cleanup(dir);
});

const quiet = (): BenchIo & { stderr: string[] } => {
  const stderr: string[] = [];
  return { stderr, out: () => {}, err: (t) => void stderr.push(t), progress: () => {} };
};

test("through herd: each level starts cold by default (reset on every engine), warm with --reset-prefix-cache false", async () => {
  // One document: every request shares a long prefix, so a warm cache shows on the first request.
  const args = ["--url", daemon.url, "--workload", "doc-qa:documents=1,doc_tokens=300,system_tokens=50,output=4", "--rate", "100,100", "--requests", "4"];
  const firstCached = async (extra: string[]) => {
    const io = quiet();
    const json = join(dir, `r${extra.length}.json`);
    expect(await benchMain([...args, ...extra, "--json", json], io)).toBe(0);
    expect(io.stderr.filter((l) => !l.startsWith("wrote"))).toEqual([]);
    const r = (await Bun.file(json).json()) as BenchResult;
    return r.runs.map((x) => x.records[0]!.cached_tokens);
  };
  expect(await firstCached([])).toEqual([0, 0]);
  const warm = await firstCached(["--reset-prefix-cache", "false"]);
  expect(warm[1]!).toBeGreaterThan(200);
}, 60_000);
