// Frontend ceiling: what any Bun proxy on this box costs, beside what herd costs, in the same run.
// Four targets in front of (or being) one zero-delay sim engine, all subprocesses; this process only
// generates load (fetch, keep-alive):
//   direct        the sim engine itself
//   bare-fetch    bench/lib/bare-proxy.ts fetch: Bun.serve + fetch() to the engine, no herd code
//   bare-socket   bench/lib/bare-proxy.ts socket: Bun.serve + a pooled keep-alive HTTP/1.1 client over Bun.connect
//   herd          `herd run` with the engine as one external worker (as bench/frontend-overhead.ts)
// Prints p50/p99 at concurrency 1 (non-stream and stream) and max requests/s at concurrency C, each
// target's ratio against direct, and the proxy process's CPU per request. Targets alternate in
// rounds (latency) and one-second windows (throughput) so load from other processes falls on all.
// BENCH_CEILING_VARIANTS=1 adds five attribution rows between bare-socket and herd: bare-fetch-stream
// (the client's body stream handed to fetch, not the read bytes), bare-fetch-json (the bare proxy
// also parses and re-serializes the request JSON), bare-fetch-bytes (reads the engine's answer whole
// and sends a new Response, as herd does for small bodies), bare-fetch-signal (that plus herd's
// per-attempt AbortController, client-signal listener and three timers) and bare-fetch-heap (the bare proxy with herd's
// daemon modules imported, not run), to tell herd's per-request work from its heap.
// Run: ./node_modules/.bin/bun bench/frontend-ceiling.ts [requests=500] [concurrency=16] [seconds=4]
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chatOnce, cpuS, simEngineArgs, writeHerdConfig } from "./lib/chat-once.ts";
import { closedLoop, freePort, waitUrl } from "./lib/child.ts";

const N = Number(process.argv[2] ?? 500);
const CONC = Number(process.argv[3] ?? 16);
const SECONDS = Number(process.argv[4] ?? 4);
const ROOT = resolve(import.meta.dir, "..");
const ROUNDS = 5;

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;


interface Target {
  name: string;
  url: string;
  pid: number | undefined; // the proxy process (none for direct)
  lat: Record<"non-stream" | "stream", number[]>;
  done: number;
  proxyCpuS: number;
}

const dir = mkdtempSync(join(tmpdir(), "herd-ceiling-"));
const procs: ReturnType<typeof Bun.spawn>[] = [];
const spawn = (argv: string[], env?: Record<string, string>) => {
  const p = Bun.spawn([process.execPath, ...argv], { cwd: ROOT, stdout: "ignore", stderr: "pipe", env: { ...process.env, ...env } });
  procs.push(p);
  return p;
};
try {
  const simPort = await freePort();
  const sim = spawn(simEngineArgs(simPort));
  const direct = `http://127.0.0.1:${simPort}`;
  const cfg = writeHerdConfig(dir, direct);
  const herd = spawn(["src/cli.ts", "run", "--config", cfg, "--listen", "127.0.0.1:0"], { HERD_LOG: "info" });
  const bf = spawn(["bench/lib/bare-proxy.ts", "fetch", direct]);
  const bs = spawn(["bench/lib/bare-proxy.ts", "socket", direct]);
  const variants = process.env.BENCH_CEILING_VARIANTS === "1";
  const bt = variants ? spawn(["bench/lib/bare-proxy.ts", "fetch-stream", direct]) : undefined;
  const bj = variants ? spawn(["bench/lib/bare-proxy.ts", "fetch-json", direct]) : undefined;
  const bb = variants ? spawn(["bench/lib/bare-proxy.ts", "fetch-bytes", direct]) : undefined;
  const bg = variants ? spawn(["bench/lib/bare-proxy.ts", "fetch-signal", direct]) : undefined;
  const bh = variants ? spawn(["bench/lib/bare-proxy.ts", "fetch-heap", direct]) : undefined;
  const t = (name: string, url: string, pid: number | undefined): Target => ({ name, url, pid, lat: { "non-stream": [], stream: [] }, done: 0, proxyCpuS: 0 });
  const targets = [
    t("direct", direct, undefined),
    t("bare-fetch", await waitUrl(bf, /listening on (http:\/\/\S+)/, "bare fetch proxy"), bf.pid),
    t("bare-socket", await waitUrl(bs, /listening on (http:\/\/\S+)/, "bare socket proxy"), bs.pid),
    ...(bt ? [t("bare-fetch-stream", await waitUrl(bt, /listening on (http:\/\/\S+)/, "bare stream proxy"), bt.pid)] : []),
    ...(bj ? [t("bare-fetch-json", await waitUrl(bj, /listening on (http:\/\/\S+)/, "bare json proxy"), bj.pid)] : []),
    ...(bb ? [t("bare-fetch-bytes", await waitUrl(bb, /listening on (http:\/\/\S+)/, "bare bytes proxy"), bb.pid)] : []),
    ...(bg ? [t("bare-fetch-signal", await waitUrl(bg, /listening on (http:\/\/\S+)/, "bare signal proxy"), bg.pid)] : []),
    ...(bh ? [t("bare-fetch-heap", await waitUrl(bh, /listening on (http:\/\/\S+)/, "bare heap proxy"), bh.pid)] : []),
    t("herd", await waitUrl(herd, /herd ready: listening on (http:\/\/\S+)/, "herd"), herd.pid),
  ];
  for (let i = 0; ; i++) {
    // the sim engine is ready when it answers (herd and the proxies do not wait for it)
    if (await chatOnce(direct, false).then(() => true, () => false)) break;
    if (i > 300 || sim.exitCode !== null) throw new Error("sim engine did not start");
    await Bun.sleep(100);
  }
  const rotated = (k: number) => targets.map((_, i) => targets[(i + k) % targets.length]!);
  const load0 = loadavg();
  console.log(
    `frontend ceiling: ${N} sequential requests per latency row, ${CONC} clients for ${SECONDS}×1 s per throughput row; targets alternate; ${navigator.hardwareConcurrency} cores shared; load average at start ${load0.map((l) => l.toFixed(2)).join(" ")}`,
  );
  for (const stream of [false, true]) {
    const kind = stream ? "stream" : "non-stream";
    for (let i = 0; i < 30; i++) for (const x of targets) await chatOnce(x.url, stream); // warm-up: JIT, connections
    // each round and each second starts one target later, so no target always follows the same one
    for (let r = 0; r < ROUNDS; r++) for (const x of rotated(r)) for (let i = 0; i < N / ROUNDS; i++) x.lat[kind].push(await chatOnce(x.url, stream));
  }
  for (const x of targets) await closedLoop(CONC, 300, () => chatOnce(x.url, false));
  for (let s = 0; s < SECONDS; s++)
    for (const x of rotated(s)) {
      const c0 = x.pid ? cpuS(x.pid) : 0;
      x.done += await closedLoop(CONC, 1000, () => chatOnce(x.url, false));
      if (x.pid) x.proxyCpuS += cpuS(x.pid) - c0;
    }
  const d = targets[0]!;
  const stat = (x: Target, kind: "non-stream" | "stream") => {
    const s = [...x.lat[kind]].sort((a, b) => a - b);
    return { p50: pct(s, 0.5), p99: pct(s, 0.99) };
  };
  console.log(`${"target".padEnd(17)} ${"req/s".padStart(7)} ${"ratio".padStart(6)} ${"proxy CPU/req".padStart(14)}   non-stream p50/p99 (added p99)   stream p50/p99 (added p99)`);
  for (const x of targets) {
    const rps = x.done / SECONDS;
    const cpu = x.pid ? `${((1e6 * x.proxyCpuS) / x.done).toFixed(0)} µs` : "-";
    const lat = (kind: "non-stream" | "stream") => {
      const a = stat(x, kind), b = stat(d, kind);
      return `${a.p50.toFixed(3)}/${a.p99.toFixed(3)} ms (${(a.p99 - b.p99 >= 0 ? "+" : "") + (a.p99 - b.p99).toFixed(3)})`;
    };
    console.log(`${x.name.padEnd(17)} ${rps.toFixed(0).padStart(7)} ${(rps / (d.done / SECONDS)).toFixed(2).padStart(5)}x ${cpu.padStart(14)}   ${lat("non-stream").padEnd(31)}  ${lat("stream")}`);
  }
  console.log(`load average at end ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
} finally {
  for (const p of procs.reverse()) p.kill("SIGTERM");
  await Promise.race([Promise.all(procs.map((p) => p.exited)), Bun.sleep(10_000)]);
  rmSync(dir, { recursive: true, force: true });
}
