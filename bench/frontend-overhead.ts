// Frontend overhead: herd (`herd run`, one external worker) in front of a zero-delay sim engine,
// versus the same sim engine called directly, in the same run. Both servers are subprocesses; this
// process only generates load (fetch, keep-alive). Prints p50/p99 latency at concurrency 1 for
// non-streaming and streaming requests, and max requests/s at concurrency C, with herd/direct ratios,
// and the CPU time each process spent per request in those windows (Linux /proc).
// Run: ./node_modules/.bin/bun bench/frontend-overhead.ts [requests=400] [concurrency=32] [seconds=3]
// BENCH_MIGRATION_LIMIT=0 turns request migration off in herd (default 3, herd's default): with it on,
// a non-streamed chat is streamed from the engine and assembled by herd (src/request/collect.ts) when
// its max_tokens (8 here) is at least frontend.migration_collect_min_tokens; BENCH_COLLECT_MIN_TOKENS
// sets that key (default: herd's default, 64; 0 collects every request, the collect path's own cost).
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chatOnce, cpuS, migrationKeys, MODEL, simEngineArgs, stopHerdAndEngine, writeHerdConfig } from "./lib/chat-once.ts";
import { closedLoop, freePort, waitUrl } from "./lib/child.ts";

const N = Number(process.argv[2] ?? 400);
const CONC = Number(process.argv[3] ?? 32);
const SECONDS = Number(process.argv[4] ?? 3);
const ROOT = resolve(import.meta.dir, "..");


function pct(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;
}

const ROUNDS = 5;

/**
 * p50/p99 at concurrency 1. Direct and herd alternate in ROUNDS batches so that noise from other
 * processes on the box (load spikes) falls on both sides alike.
 */
async function latency(direct: string, viaHerd: string, stream: boolean) {
  for (let i = 0; i < 30; i++) {
    await chatOnce(direct, stream); // warm-up: JIT, connections
    await chatOnce(viaHerd, stream);
  }
  const d: number[] = [];
  const h: number[] = [];
  for (let r = 0; r < ROUNDS; r++) {
    for (let i = 0; i < N / ROUNDS; i++) d.push(await chatOnce(direct, stream));
    for (let i = 0; i < N / ROUNDS; i++) h.push(await chatOnce(viaHerd, stream));
  }
  d.sort((a, b) => a - b);
  h.sort((a, b) => a - b);
  return { d: { p50: pct(d, 0.5), p99: pct(d, 0.99) }, h: { p50: pct(h, 0.5), p99: pct(h, 0.99) } };
}

/** Completed requests in `ms` with CONC clients in a closed loop. */
function window(url: string, ms: number): Promise<number> {
  return closedLoop(CONC, ms, () => chatOnce(url, false));
}

const selfCpuS = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};

/** CPU per completed request of the load generator, the engine and herd over some windows. */
class CpuTally {
  gen = 0;
  engine = 0;
  herd = 0;
  requests = 0;
  async measure(pids: { engine: number; herd: number }, run: () => Promise<number>): Promise<number> {
    const g0 = selfCpuS(), e0 = cpuS(pids.engine), h0 = cpuS(pids.herd);
    const n = await run();
    this.gen += selfCpuS() - g0;
    this.engine += cpuS(pids.engine) - e0;
    this.herd += cpuS(pids.herd) - h0;
    this.requests += n;
    return n;
  }
  perRequestUs(): { gen: number; engine: number; herd: number } {
    const us = (s: number) => (1e6 * s) / this.requests;
    return { gen: us(this.gen), engine: us(this.engine), herd: us(this.herd) };
  }
}

/** Max requests/s, alternating one-second windows between direct and herd; CPU per request of each process. */
async function throughput(direct: string, viaHerd: string, pids: { engine: number; herd: number }) {
  await window(direct, 300);
  await window(viaHerd, 300);
  let d = 0;
  let h = 0;
  const dCpu = new CpuTally();
  const hCpu = new CpuTally();
  for (let i = 0; i < SECONDS; i++) {
    d += await dCpu.measure(pids, () => window(direct, 1000));
    h += await hCpu.measure(pids, () => window(viaHerd, 1000));
  }
  return { d: d / SECONDS, h: h / SECONDS, dCpu: dCpu.perRequestUs(), hCpu: hCpu.perRequestUs() };
}

const dir = mkdtempSync(join(tmpdir(), "herd-bench-"));
const simPort = await freePort();
const sim = Bun.spawn([process.execPath, ...simEngineArgs(simPort)], {
  cwd: ROOT,
  stdout: "ignore",
  stderr: "pipe",
});
const cfg = writeHerdConfig(dir, `http://127.0.0.1:${simPort}`, migrationKeys(true));
// BENCH_PROFILE_DIR=dir writes a markdown CPU profile of herd there (on exit); with BENCH_PROFILE_JSON=1
// a .cpuprofile (Chrome DevTools format) instead.
const prof = process.env.BENCH_PROFILE_DIR ? [process.env.BENCH_PROFILE_JSON ? "--cpu-prof" : "--cpu-prof-md", `--cpu-prof-dir=${process.env.BENCH_PROFILE_DIR}`] : [];
const herd = Bun.spawn([process.execPath, ...prof, "src/cli.ts", "run", "--config", cfg, "--listen", "127.0.0.1:0"], {
  cwd: ROOT,
  stdout: "ignore",
  stderr: "pipe",
  env: { ...process.env, HERD_LOG: "info" },
});
try {
  const direct = `http://127.0.0.1:${simPort}`;
  const viaHerd = await waitUrl(herd, /herd ready: listening on (http:\/\/\S+)/, "herd");
  const row = (name: string, d: number, h: number, unit: string) =>
    console.log(`${name.padEnd(28)} direct ${d.toFixed(3).padStart(9)} ${unit}   herd ${h.toFixed(3).padStart(9)} ${unit}   herd/direct ${(h / d).toFixed(2)}x   added ${(h - d).toFixed(3)} ${unit}`);
  console.log(`frontend overhead: ${N} sequential requests per latency row, ${CONC} concurrent clients for ${SECONDS}×1 s per throughput row; direct and herd alternate; load generator, herd and the sim engine share this box (${navigator.hardwareConcurrency} cores)`);
  for (const stream of [false, true]) {
    const { d, h } = await latency(direct, viaHerd, stream);
    const kind = stream ? "stream" : "non-stream";
    row(`latency p50 (${kind})`, d.p50, h.p50, "ms");
    row(`latency p99 (${kind})`, d.p99, h.p99, "ms");
  }
  const { d: dRps, h: hRps, dCpu, hCpu } = await throughput(direct, viaHerd, { engine: sim.pid, herd: herd.pid });
  console.log(`${"max requests/s (non-stream)".padEnd(28)} direct ${dRps.toFixed(0).padStart(9)}      herd ${hRps.toFixed(0).padStart(9)}      herd/direct ${(hRps / dRps).toFixed(2)}x`);
  // CPU time per request (USER_HZ ticks: ±10 ms per window, small against the windows' totals) shows
  // where the cores go, which a throughput ratio on a shared box cannot: herd's own cost per request.
  const cpu = (c: { gen: number; engine: number; herd: number }) => `loadgen ${c.gen.toFixed(0)} µs, engine ${c.engine.toFixed(0)} µs`;
  console.log(`${"CPU per request (non-stream)".padEnd(28)} direct: ${cpu(dCpu)}   via herd: ${cpu(hCpu)}, herd ${hCpu.herd.toFixed(0)} µs`);
} finally {
  await stopHerdAndEngine(herd, sim);
  rmSync(dir, { recursive: true, force: true });
}
