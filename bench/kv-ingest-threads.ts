// KV event ingest sharded by engine worker onto worker threads (issue 25: "scaling with cores").
// Each thread is one shard: a KvIngest over its own BlockIndex, owning every Nth engine worker
// (its engine-hash maps and an index of its workers' blocks): not the daemon's threaded path
// (kv_ingest.threads keeps one index on the main thread; bench/kv-ingest-daemon.ts measures that);
// this measures how the per-shard work — decode, hashing, engine-hash map, index — scales when
// split over threads, steady state at capacity (every batch evicts a prompt, one BlockRemoved per
// block, and stores one), 16 engine workers, ~1M blocks in all, capacity hints on.
//   1 thread vs 2 threads, alternating, in one run; wall rate and rate per CPU-second of the
//   process (all threads, GC included). On a shared box, compare the two within a run.
// Run: ./node_modules/.bin/bun bench/kv-ingest-threads.ts
//   KV_THREADS_BATCHES (steady-state batches per engine worker, default 400), KV_THREADS_REPS (2),
//   KV_THREADS_BLOCKS (1,000,000).
import { loadavg } from "node:os";
import type { BuildMessage } from "./lib/kv-ingest-shard.ts";

const WORKERS = 16;
const BS = 16;
const PROMPT = 28;
const TOTAL = Number(process.env.KV_THREADS_BLOCKS ?? 1_000_000);
const BATCHES = Number(process.env.KV_THREADS_BATCHES ?? 400);
const REPS = Number(process.env.KV_THREADS_REPS ?? 2);
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const fmt = (n: number, d = 0) => n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });

function call(w: Worker, msg: unknown, want: string): Promise<{ wallMs: number; entries: number }> {
  return new Promise((resolve, reject) => {
    w.onmessage = (m: MessageEvent) => {
      if (m.data?.kind === want) resolve(m.data);
    };
    w.onerror = (e) => reject(new Error(`shard thread failed: ${e.message}`));
    w.postMessage(msg);
  });
}

async function trial(threads: number) {
  const shards = Array.from({ length: threads }, () => new Worker(new URL("./lib/kv-ingest-shard.ts", import.meta.url).href));
  try {
    await Promise.all(
      shards.map((w, t) => {
        const msg: BuildMessage = {
          kind: "build",
          workers: Array.from({ length: WORKERS }, (_, i) => i).filter((i) => i % threads === t),
          blocksPerWorker: Math.floor(TOTAL / WORKERS),
          batchesPerWorker: BATCHES,
          blockSize: BS,
        };
        return call(w, msg, "ready");
      }),
    );
    const c0 = cpuMs();
    const t0 = performance.now();
    const done = await Promise.all(shards.map((w) => call(w, { kind: "run" }, "done")));
    const wallS = (performance.now() - t0) / 1000;
    const cpuS = (cpuMs() - c0) / 1000;
    const events = 2 * PROMPT * BATCHES * WORKERS;
    return { threads, wallS, cpuS, events, entries: done.reduce((a, d) => a + d.entries, 0), shardWallS: done.map((d) => d.wallMs / 1000) };
  } finally {
    for (const w of shards) w.terminate();
  }
}

console.log(`kv-ingest-threads: ${WORKERS} engine workers, ~${fmt(TOTAL)} blocks, ${fmt(2 * PROMPT * BATCHES * WORKERS)} steady-state block events per trial, Bun ${Bun.version}, load average ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);
const results: Awaited<ReturnType<typeof trial>>[] = [];
for (let r = 0; r < REPS; r++) {
  for (const threads of [1, 2]) {
    const x = await trial(threads);
    results.push(x);
    console.log(`  ${threads} thread${threads > 1 ? "s" : " "}: ${fmt(x.events / x.wallS)} block events/s wall, ${fmt(x.events / x.cpuS)} per CPU-second (process); shard wall ${x.shardWallS.map((s) => fmt(s * 1000)).join(", ")} ms; load ${loadavg()[0]!.toFixed(1)}`);
  }
}
const entries = new Set(results.map((x) => x.entries));
if (entries.size !== 1) throw new Error(`shards disagree on indexed blocks: ${[...entries].join(", ")}`);
for (let r = 0; r < REPS; r++) {
  const one = results[2 * r]!;
  const two = results[2 * r + 1]!;
  console.log(`rep ${r + 1}: 2 threads / 1 thread: wall rate ×${fmt(one.wallS / two.wallS, 2)}, rate per CPU-second ×${fmt(one.cpuS / two.cpuS, 2)}`);
}
