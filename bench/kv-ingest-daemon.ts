// The daemon's KV event ingest path end to end (issue 25: ingest "scaling with cores"): KvConsumer
// as src/daemon/node.ts builds it (RelayIndex, capacity hints, ZMTP SUB sockets from the specs), fed
// over TCP by 16 engine publishers in another process (bench/lib/kv-publisher-proc.ts), with
// kv_ingest.threads 0 (the event loop, the baseline), 1 and 2, in one run, the order rotated per
// rep. After a fill to ~1M blocks and KV_DAEMON_WARM untimed steady-state chunks (so the event loop's
// and the fresh threads' removal paths are JIT-warm), each trial times one more chunk of the steady state at
// capacity (every batch 28 BlockRemoved + one 28-block BlockStored) from `go` until every batch is
// applied to the index.
// Prints block events per wall-second, per CPU-second of this process (all its threads), and the
// main thread's CPU per event (/proc/self/task/<pid>/stat: the room left for routing); the
// publishers' CPU is not counted, but they share the box.
// Also prints where the process's CPU went, per thread group (/proc/self/task/*/stat, 10 ms
// ticks): main, the ingest threads (Bun names them "Worker"), the JIT compiler threads
// (JITWorker, JSCWarmUp), GC helpers (HeapHelper, mi-scavenger) and the rest.
// Run: ./node_modules/.bin/bun bench/kv-ingest-daemon.ts
//   KV_DAEMON_REPS (2), KV_DAEMON_WARM (untimed steady-state chunks before the timed one: 2, so
//   each of 2 threads sees as many warm-up events as 1 thread did with 1), KV_DAEMON_BATCHES (1,000 steady-state batches per worker),
//   KV_DAEMON_BLOCKS_PER_WORKER (61,000), KV_DAEMON_THREADS ("0,1,2").
import { loadavg } from "node:os";
import { readdirSync, readFileSync } from "node:fs";
import { RealClock } from "../src/core/clock.ts";
import { createLogger } from "../src/core/log.ts";
import { SeededRng } from "../src/core/rng.ts";
import { RelayIndex, relayEpoch } from "../src/cluster/kv-relay.ts";
import { KvConsumer } from "../src/kv/consumer.ts";

const W = 16;
const PB = 28;
const PER = Number(process.env.KV_DAEMON_BLOCKS_PER_WORKER ?? 61_000);
const N = Number(process.env.KV_DAEMON_BATCHES ?? 1000);
const WARM = Number(process.env.KV_DAEMON_WARM ?? 2);
const REPS = Number(process.env.KV_DAEMON_REPS ?? 2);
const MODES = (process.env.KV_DAEMON_THREADS ?? "0,1,2").split(",").map(Number);
const FILL = 1 + Math.ceil(PER / PB); // batches per worker before the steady state
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
/** A thread's user + system CPU in ms (clock ticks of 10 ms), and its name. */
function taskCpu(tid: string): { comm: string; ms: number } {
  const s = readFileSync(`/proc/self/task/${tid}/stat`, "utf8");
  const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
  return { comm: s.slice(s.indexOf("(") + 1, s.lastIndexOf(")")), ms: (Number(f[11]) + Number(f[12])) * 10 };
}
const mainCpuMs = () => taskCpu(String(process.pid)).ms;
const GROUPS = ["main", "ingest", "jit", "gc", "other"] as const;
const groupOf = (tid: string, comm: string): (typeof GROUPS)[number] =>
  tid === String(process.pid) ? "main" : comm.startsWith("Worker") ? "ingest" : /JIT|JSCWarmUp/.test(comm) ? "jit" : /HeapHelper|scavenger/.test(comm) ? "gc" : "other";
/** CPU ms of every live thread, by thread id (a thread that exits between two readings is not counted). */
function tasksCpu(): Map<string, { group: (typeof GROUPS)[number]; ms: number }> {
  const out = new Map<string, { group: (typeof GROUPS)[number]; ms: number }>();
  for (const tid of readdirSync("/proc/self/task")) {
    try {
      const t = taskCpu(tid);
      out.set(tid, { group: groupOf(tid, t.comm), ms: t.ms });
    } catch {
      // exited meanwhile
    }
  }
  return out;
}
function cpuByGroup(a: ReturnType<typeof tasksCpu>, b: ReturnType<typeof tasksCpu>): Record<(typeof GROUPS)[number], number> {
  const out = { main: 0, ingest: 0, jit: 0, gc: 0, other: 0 };
  for (const [tid, t] of b) out[t.group] += t.ms - (a.get(tid)?.ms ?? 0);
  return out;
}
const fmt = (n: number, d = 0) => n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });

async function trial(threads: number) {
  const pub = Bun.spawn(["bun", new URL("./lib/kv-publisher-proc.ts", import.meta.url).pathname], {
    stdin: "pipe",
    stdout: "pipe",
    stderr: "inherit",
    env: { ...process.env, KVP_WORKERS: String(W), KVP_BLOCKS_PER_WORKER: String(PER), KVP_BATCHES: String(N), KVP_CHUNKS: String(WARM + 1) },
  });
  const lines = (async function* () {
    let buf = "";
    for await (const chunk of pub.stdout) {
      buf += new TextDecoder().decode(chunk);
      for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
        yield buf.slice(0, i);
        buf = buf.slice(i + 1);
      }
    }
  })();
  const next = async () => (await lines.next()).value as string;
  const { endpoints } = JSON.parse(await next()) as { endpoints: string[] };
  const index = new RelayIndex(relayEpoch(new SeededRng(1)));
  const kv = new KvConsumer({ clock: new RealClock(), log: createLogger("bench", { level: "warn" }), index, ingestThreads: threads });
  try {
    endpoints.forEach((endpoint, w) => kv.add({ id: `w${w}`, model: "m", blockSize: 16, endpoint, replayEndpoint: "", topic: "", kvBlocks: PER + 8 }));
    const applied = async () => {
      await kv.ingest.sync();
      return kv.ingest.status().reduce((a, s) => a + s.batchesApplied, 0);
    };
    if ((await next()) !== "filled") throw new Error("publisher did not fill");
    while ((await applied()) < W * FILL) await Bun.sleep(5);
    for (let c = 1; c <= WARM; c++) {
      pub.stdin.write("go\n"); // an untimed warm-up chunk
      pub.stdin.flush();
      if ((await next()) !== "sent") throw new Error("publisher did not send");
      while ((await applied()) < W * (FILL + c * N)) await Bun.sleep(5);
    }
    Bun.gc(true);
    const f0 = kv.ingest.threadFigures().reduce((a, t) => a + t.flushes, 0);
    const c0 = cpuMs();
    const m0 = mainCpuMs();
    const k0 = tasksCpu();
    const t0 = performance.now();
    pub.stdin.write("go\n");
    pub.stdin.flush();
    while ((await applied()) < W * (FILL + (WARM + 1) * N)) await Bun.sleep(5);
    const wallS = (performance.now() - t0) / 1000;
    const cpuS = (cpuMs() - c0) / 1000;
    const mainS = (mainCpuMs() - m0) / 1000;
    const groups = cpuByGroup(k0, tasksCpu());
    await kv.ingest.sync();
    const flushes = kv.ingest.threadFigures().reduce((a, t) => a + t.flushes, 0) - f0;
    const st = kv.ingest.status();
    const gaps = st.reduce((a, s) => a + s.gaps + s.resyncs, 0);
    const events = 2 * PB * N * W;
    return { threads, wallS, cpuS, mainS, groups, events, gaps, flushes, entries: index.stats().entries, load: loadavg()[0]! };
  } finally {
    pub.stdin.write("quit\n");
    pub.stdin.end();
    kv.close();
    await pub.exited;
  }
}

console.log(`kv-ingest-daemon: ${W} engine workers × ${fmt(PER)} blocks (capacity hints), ${fmt(2 * PB * N * W)} steady-state block events per trial over ZMTP, Bun ${Bun.version}, load average ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);
const byRep: Map<number, Awaited<ReturnType<typeof trial>>>[] = [];
for (let r = 0; r < REPS; r++) {
  const rep = new Map<number, Awaited<ReturnType<typeof trial>>>();
  for (let k = 0; k < MODES.length; k++) {
    const threads = MODES[(k + r) % MODES.length]!;
    const x = await trial(threads);
    rep.set(threads, x);
    console.log(
      `  rep ${r + 1}, ingest threads ${threads}: ${fmt(x.events / x.wallS)} block events/s wall, ${fmt(x.events / x.cpuS)} per CPU-s (process), main thread ${fmt((x.mainS * 1e9) / x.events)} ns CPU per event (${fmt(x.mainS * 1000)} ms); ${threads > 0 ? `${fmt(x.flushes)} op messages; ` : ""}gaps+resyncs ${x.gaps}; load ${x.load.toFixed(1)}`,
    );
    console.log(`    CPU ms by thread: ${GROUPS.map((g) => `${g} ${x.groups[g]}`).join(", ")}`);
  }
  byRep.push(rep);
}
const entries = new Set(byRep.flatMap((m) => [...m.values()].map((x) => x.entries)));
if (entries.size !== 1) throw new Error(`modes disagree on indexed blocks: ${[...entries].join(", ")}`);
for (let r = 0; r < REPS; r++) {
  const base = byRep[r]!.get(0);
  if (!base) continue;
  for (const [t, x] of byRep[r]!) {
    if (t === 0) continue;
    console.log(`rep ${r + 1}: ${t} thread(s) / event loop: wall rate ×${fmt(base.wallS / x.wallS, 2)}, rate per CPU-s ×${fmt(base.cpuS / x.cpuS, 2)}, main-thread CPU per event ×${fmt(x.mainS / base.mainS, 2)}`);
  }
}
process.exit(0);
