// Latency A/B of two herd trees in one run: one zero-delay sim engine, `herd run` from tree A and from
// tree B (each a checkout with node_modules, e.g. a `git archive` of main), and the engine direct, as
// subprocesses; sequential requests (concurrency 1) in ROUNDS rounds, the order reversing each round,
// so load from other processes falls on all three. Prints p50/p90/p99/p99.5 and each herd's added
// latency against direct, and each herd's CPU (all threads, /proc) per request over its own rounds.
// More requests per row than bench/frontend-overhead.ts (whose p99 of 500 is its 5th worst) make the
// tail comparable between trees. AB_ENV_B="K=V,K=V" adds environment variables to B's herd only
// (the same tree twice then compares a setting, e.g. an env-gated experiment).
// Run: ./node_modules/.bin/bun bench/frontend-ab.ts <treeA> <treeB> [requests=2000] [stream|non-stream] [rounds=10]
import { mkdtempSync, rmSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chatOnce, cpuS, migrationKeys, simEngineArgs, stopHerdAndEngine, writeHerdConfig } from "./lib/chat-once.ts";
import { freePort, waitUrl } from "./lib/child.ts";

const [A, B] = [resolve(process.argv[2] ?? ""), resolve(process.argv[3] ?? "")];
const N = Number(process.argv[4] ?? 2000);
const stream = (process.argv[5] ?? "stream") === "stream";
const ROUNDS = Number(process.argv[6] ?? 10);
if (!process.argv[3]) throw new Error("usage: frontend-ab.ts <treeA> <treeB> [requests] [stream|non-stream] [rounds]");
const envB = process.env.AB_ENV_B ? Object.fromEntries(process.env.AB_ENV_B.split(",").map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)])) : {};
const pct = (s: number[], p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;

const dir = mkdtempSync(join(tmpdir(), "herd-ab-"));
const port = await freePort();
const sim = Bun.spawn([process.execPath, ...simEngineArgs(port)], { cwd: A, stdout: "ignore", stderr: "ignore" });
const engine = `http://127.0.0.1:${port}`;
const herd = (tree: string, tag: string, env: Record<string, string>) => {
  const cfg = writeHerdConfig(mkdtempSync(join(dir, `${tag}-`)), engine, migrationKeys(!stream));
  return Bun.spawn([process.execPath, "src/cli.ts", "run", "--config", cfg, "--listen", "127.0.0.1:0"], { cwd: tree, stdout: "ignore", stderr: "pipe", env: { ...process.env, HERD_LOG: "info", ...env } });
};
const ha = herd(A, "a", {});
const hb = herd(B, "b", envB);
try {
  const targets = [
    { name: "direct", url: engine, pid: 0, ms: [] as number[], cpu: 0 },
    { name: `A ${A}`, url: await waitUrl(ha, /herd ready: listening on (http:\/\/\S+)/, "herd A"), pid: ha.pid, ms: [] as number[], cpu: 0 },
    { name: `B ${B}${process.env.AB_ENV_B ? ` ${process.env.AB_ENV_B}` : ""}`, url: await waitUrl(hb, /herd ready: listening on (http:\/\/\S+)/, "herd B"), pid: hb.pid, ms: [] as number[], cpu: 0 },
  ];
  for (let i = 0; i < 100; i++) for (const t of targets) await chatOnce(t.url, stream); // warm-up: JIT, connections
  for (let r = 0; r < ROUNDS; r++) {
    for (const t of r % 2 ? [...targets].reverse() : targets) {
      const c0 = t.pid ? cpuS(t.pid) : 0;
      for (let i = 0; i < N / ROUNDS; i++) t.ms.push(await chatOnce(t.url, stream));
      if (t.pid) t.cpu += cpuS(t.pid) - c0;
    }
  }
  for (const t of targets) t.ms.sort((a, b) => a - b);
  const d = targets[0]!;
  console.log(`frontend A/B: ${N} sequential ${stream ? "streamed" : "non-streamed"} requests per target in ${ROUNDS} rounds; ${new Date().toISOString()}; load average ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
  for (const t of targets) {
    const f = (p: number) => `${pct(t.ms, p).toFixed(2)}${t === d ? "" : ` (+${(pct(t.ms, p) - pct(d.ms, p)).toFixed(2)})`}`;
    console.log(`  ${t.name.padEnd(30).slice(0, 60)} p50 ${f(0.5)}  p90 ${f(0.9)}  p99 ${f(0.99)}  p99.5 ${f(0.995)}${t.pid ? `  herd CPU ${((t.cpu * 1e6) / N).toFixed(0)} µs/request` : ""}`);
  }
} finally {
  hb.kill("SIGTERM");
  await Promise.race([hb.exited, Bun.sleep(10_000)]);
  await stopHerdAndEngine(ha, sim);
  rmSync(dir, { recursive: true, force: true });
}
