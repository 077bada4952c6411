// Does the KV tier's work delay the daemon's own loop? (issue 22 "Data-plane servers off the control
// loop"). This process plays the daemon: a Bun.serve `/health` (answered on this loop, as herd's is)
// and a 10 ms heartbeat timer whose lateness is measured (a cluster beat is such a timer). The tier
// (TierService: CPU tier + RESP server) runs either on this loop (`kv_tier.thread: main`, the
// baseline) or on its own thread (`worker`, the default), in the same run. Load, from child processes:
//   ping  one client pipelines 1.5M inline PINGs (KV_ISO_PINGS)
//   get   8 clients GET a 16 MiB value back to back for KV_ISO_GET_S seconds (default 6)
// A child process probes /health every 10 ms throughout. Printed per mode and load: /health p50 /
// p99 / max, heartbeat lateness p99 / max, and the load's own rate; then worker / main ratios.
// Run: ./node_modules/.bin/bun bench/tier-isolation.ts   (shared machine: figures vary run to run)
import { spawn } from "bun";
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { RealClock } from "../src/core/clock.ts";
import { parseConfigText } from "../src/config/index.ts";
import { TierService } from "../src/tier/service.ts";
import { BenchClient } from "./kv-tier/client.ts";

const PINGS = Number(process.env.KV_ISO_PINGS ?? 1_500_000);
const GET_S = Number(process.env.KV_ISO_GET_S ?? 6);
const BEAT_MS = 10;
const MiB = 1024 * 1024;
const clock = new RealClock();
const id = `herd-iso-bench-${process.pid}`;
const shm = join("/dev/shm", id);
const disk = join("/tmp", id);
mkdirSync(disk, { recursive: true });

const health = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: () => new Response("ok\n") });
const q = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.floor(p * s.length))]!;
};

/** Heartbeat lateness: a timer every BEAT_MS; how late each one fires. */
function heartbeat(): { stop: () => number[] } {
  const late: number[] = [];
  let next = clock.now() + BEAT_MS;
  let h = clock.setTimer(BEAT_MS, function tick() {
    const now = clock.now();
    late.push(Math.max(0, now - next));
    next = now + BEAT_MS;
    h = clock.setTimer(BEAT_MS, tick);
  });
  return { stop: () => (h.cancel(), late) };
}

async function run(mode: "main" | "worker", load: "ping" | "get") {
  rmSync(shm, { recursive: true, force: true });
  const cfg = parseConfigText(`node: { data_dir: ${disk}/${mode}-${load} }\nkv_tier:\n  thread: ${mode}\n  cpu: { size: 64MiB, path: ${shm} }\n  resp: { listen: 127.0.0.1:0 }\n`, "herd.yaml", { hostname: "h", dataDir: disk });
  const svc = new TierService({ config: cfg.config!, clock, thread: mode === "worker", bootId: "bench" });
  await svc.start();
  const port = svc.respPort!;
  if (load === "get") {
    const c = await BenchClient.connect(port);
    const v = new Uint8Array(16 * MiB);
    crypto.getRandomValues(v.subarray(0, 65536));
    await c.set("big", v);
    c.close();
  }
  const probe = spawn([process.execPath, join(import.meta.dir, "kv-tier/health-probe.ts"), `http://127.0.0.1:${health.port}/health`, "10"], { stdin: "pipe", stdout: "pipe" });
  await Bun.sleep(300);
  const beat = heartbeat();
  const args = load === "ping" ? ["ping", String(port), String(PINGS)] : ["get", String(port), "big", "8", String(GET_S)];
  const child = spawn([process.execPath, join(import.meta.dir, "kv-tier/load.ts"), ...args], { stdout: "pipe" });
  const out = JSON.parse((await new Response(child.stdout).text()).trim()) as { ms: number; pings?: number; bytes?: number; gets?: number };
  const late = beat.stop();
  probe.stdin.end();
  const lat = JSON.parse(await new Response(probe.stdout).text()) as number[];
  await svc.stop();
  const rate = load === "ping" ? `${((out.pings! / out.ms) * 1000 / 1e3).toFixed(0)}k PING/s` : `${(out.bytes! / MiB / (out.ms / 1000)).toFixed(0)} MiB/s`;
  return { mode, load, healthP50: q(lat, 0.5), healthP99: q(lat, 0.99), healthMax: Math.max(...lat), beatP99: q(late, 0.99), beatMax: Math.max(...late), rate, probes: lat.length };
}

const f = (n: number) => n.toFixed(1).padStart(8);
console.log(`tier isolation: ${PINGS} pipelined PINGs / 8 clients × GET 16 MiB for ${GET_S} s; /health probed every 10 ms, heartbeat every ${BEAT_MS} ms`);
console.log("load  tier on   /health p50     p99     max | beat late p99    max | load rate");
const rows = [];
for (const load of ["ping", "get"] as const) {
  for (const mode of ["main", "worker"] as const) {
    const r = await run(mode, load);
    rows.push(r);
    console.log(`${load.padEnd(5)} ${mode.padEnd(7)} ${f(r.healthP50)} ${f(r.healthP99)} ${f(r.healthMax)} | ${f(r.beatP99)} ${f(r.beatMax)} | ${r.rate} (${r.probes} probes)`);
  }
}
for (const load of ["ping", "get"] as const) {
  const m = rows.find((r) => r.load === load && r.mode === "main")!;
  const w = rows.find((r) => r.load === load && r.mode === "worker")!;
  console.log(`${load}: worker / main  /health p99 ${(w.healthP99 / m.healthP99).toFixed(2)}x  max ${(w.healthMax / m.healthMax).toFixed(2)}x  beat p99 ${(w.beatP99 / Math.max(0.01, m.beatP99)).toFixed(2)}x`);
}
health.stop(true);
rmSync(shm, { recursive: true, force: true });
rmSync(disk, { recursive: true, force: true });
process.exit(0);
