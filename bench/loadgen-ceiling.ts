// Load-generator ceiling: how many streaming requests/s `herd bench`'s client (src/bench runner + SSE
// client, the same code the command runs) sustains against a zero-delay sim engine. The engine runs in
// a subprocess (its own core); this process only generates load. For each level it prints achieved
// req/s, errors, send lag (open loop) and the CPU each side used, so it is clear which side saturated:
// a side at ~100% of a core is the bottleneck.
// Run: ./node_modules/.bin/bun bench/loadgen-ceiling.ts [seconds=5] [output_tokens=8] [input_tokens=32]
import { cpus, loadavg } from "node:os";
import { resolve } from "node:path";
import type { Target } from "../src/bench/client.ts";
import { plan } from "../src/workload/plan.ts";
import { runOnce } from "../src/bench/runner.ts";
import { summarize } from "../src/workload/stats.ts";
import type { FixedSpec } from "../src/workload/workloads.ts";

const SECONDS = Number(process.argv[2] ?? 5);
const OUT = Number(process.argv[3] ?? 8);
const IN = Number(process.argv[4] ?? 32);
const ROOT = resolve(import.meta.dir, "..");
const TICKS = 100; // USER_HZ on Linux

const engine = Bun.spawn([process.execPath, `${ROOT}/src/cli.ts`, "sim-engine", "--port", "0", "--zero-delay", "--model", "ceiling"], { stdout: "pipe", stderr: "inherit" });
const url = await (async () => {
  const reader = (engine.stdout as ReadableStream<Uint8Array>).getReader();
  const dec = new TextDecoder();
  let buf = "";
  for (;;) {
    const r = await reader.read();
    if (r.done) throw new Error(`sim engine exited:\n${buf}`);
    buf += dec.decode(r.value);
    const m = /on (http:\/\/[0-9.]+:\d+)/.exec(buf);
    if (m) {
      void (async () => {
        while (!(await reader.read()).done);
      })();
      return m[1]!;
    }
  }
})();

function procCpuS(pid: number): number {
  const stat = require("node:fs").readFileSync(`/proc/${pid}/stat`, "utf8") as string;
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / TICKS; // utime + stime
}

const target: Target = { url, model: "ceiling", apiKey: null, ignoreEos: true, timeout_s: 30 };
const cpuPerReq: number[] = [];
const fixed: FixedSpec = { kind: "fixed", input: IN, output: OUT, api: "chat" };

async function level(name: string, opts: { rate?: number; concurrency?: number }) {
  const cpu0 = process.cpuUsage();
  const eng0 = procCpuS(engine.pid);
  const t0 = performance.now();
  const { records, dispatchLag_s } = await runOnce({
    target,
    requests: plan(fixed, opts.rate ? { kind: "poisson", rate: opts.rate } : { kind: "closed" }, { requests: null, duration_s: opts.rate ? SECONDS : null }, 7),
    concurrency: opts.concurrency ?? null,
    duration_s: opts.concurrency ? SECONDS : null,
    ordered: false,
    maxInflight: 4096,
  });
  const wall = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const eng = procCpuS(engine.pid) - eng0;
  const s = summarize(records, { warmup_s: 0, slo: {} });
  const lag = dispatchLag_s.slice().sort((a, b) => a - b);
  const lagP99 = opts.rate ? `${(lag[Math.floor(lag.length * 0.99)]! * 1000).toFixed(1)} ms` : "-";
  const genCpuS = (cpu.user + cpu.system) / 1e6;
  const usPerReq = (genCpuS / records.length) * 1e6;
  cpuPerReq.push(usPerReq);
  console.log(
    `${name.padEnd(20)} ${s.throughput.requests_per_s.toFixed(0).padStart(5)} req/s ${s.throughput.tokens_per_s.toFixed(0).padStart(6)} tok/s  ` +
      `ok ${String(s.requests.completed).padStart(5)} err ${String(s.errors.total).padStart(3)}  TTFT p50 ${(s.ttft!.p50 * 1000).toFixed(1).padStart(6)} ms  ` +
      `lag p99 ${lagP99.padStart(9)}  CPU loadgen ${((genCpuS / wall) * 100).toFixed(0).padStart(3)}% (${usPerReq.toFixed(0)} µs/req)  engine ${((eng / wall) * 100).toFixed(0).padStart(3)}% (${((eng / records.length) * 1e6).toFixed(0)} µs/req)`,
  );
}

console.log(`loadgen ceiling: fixed workload (chat, ${IN} input words ≈ tokens, ${OUT} output tokens, ignore_eos), zero-delay sim engine in a subprocess`);
console.log(`host: ${cpus().length} cores (${cpus()[0]?.model ?? "?"}), load average before: ${loadavg().map((x) => x.toFixed(2)).join(" ")}, bun ${Bun.version}, ${SECONDS}s per level`);
await level("warm-up conc 32", { concurrency: 32 });
for (const c of [16, 64, 256]) await level(`closed conc ${c}`, { concurrency: c });
for (const r of [1000, 2000]) await level(`open Poisson ${r}/s`, { rate: r });
// Skip the warm-up level. The best level is the generator's steady cost; overloaded levels (thousands
// in flight) cost more per request.
const sorted = cpuPerReq.slice(1).sort((a, b) => a - b);
const best = sorted[0]!;
const median = sorted[Math.floor(sorted.length / 2)]!;
console.log(`load average after: ${loadavg().map((x) => x.toFixed(2)).join(" ")}`);
console.log(
  `loadgen CPU per streaming request: best level ${best.toFixed(0)} µs, median ${median.toFixed(0)} µs → ` +
    `≈ ${Math.round(1e6 / best)} / ${Math.round(1e6 / median)} req/s if the generator had one core to itself`,
);
engine.kill("SIGTERM");
await engine.exited;
