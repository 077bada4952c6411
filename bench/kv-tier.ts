// KV tier benchmark (issue 14 "Benchmarks"): ratios against baselines measured in the same run.
//   1. SET/GET of 1 MiB and 16 MiB values: herd's RESP server vs a real redis-server (both separate
//      processes on loopback, same client); targets: ahead of redis-server for large values. herd runs
//      as the daemon ships it (bench/kv-tier/resp-child.ts "daemon": TierService with every default:
//      the tier on its own thread, kv_tier.resp.direct_recv on where available; the tier's start line
//      is printed). The 1 MiB rounds are bench/kv-tier/resp-set.ts's (warm-up 20, then best of 5
//      alternating rounds of 200 over 8 keys, the same value); resp-set.ts has the detailed comparison.
//   2. The CPU tier in-process (KvTier put/get with its catalog rows) vs a plain buffer copy; target ≥ 0.8× (issue 25).
//   3. SSD tier write/read MB/s vs `dd` with direct I/O on the same file system.
//   4. Catalog lookups/s and eviction cost with N objects (KV_TIER_BENCH_OBJECTS, default 1M; 10M was
//      measured with KV_TIER_BENCH_ONLY=catalog KV_TIER_BENCH_OBJECTS=10000000).
// Run: ./node_modules/.bin/bun bench/kv-tier.ts   (one run; the machine is shared, numbers vary)
import { spawn, spawnSync } from "bun";
import { mkdirSync, rmSync, statfsSync } from "node:fs";
import { join } from "node:path";
import { RealClock } from "../src/core/clock.ts";
import { Catalog } from "../src/tier/catalog.ts";
import { DirMedium } from "../src/tier/dir-medium.ts";
import { lru } from "../src/tier/policy.ts";
import { KvTier, crc32 } from "../src/tier/tier.ts";
import { BenchClient, benchValue } from "./kv-tier/client.ts";
import { freePort } from "./lib/child.ts";

const MiB = 1024 * 1024;
const OBJECTS = Number(process.env.KV_TIER_BENCH_OBJECTS ?? 1_000_000);
const id = `herd-kv-bench-${process.pid}`;
const shm = join("/dev/shm", id);
const disk = join(process.env.KV_TIER_BENCH_DIR ?? "/tmp", id);
mkdirSync(disk, { recursive: true });
const now = () => performance.now();
const mbps = (bytes: number, ms: number) => bytes / MiB / (ms / 1000);
const fmt = (n: number) => n.toFixed(0).padStart(7);
const value = benchValue;

/** The child's port, and the tier's start line (which read path large SET values take). */
async function waitPort(proc: ReturnType<typeof spawn>): Promise<{ port: number; line: string }> {
  const reader = (proc.stdout as ReadableStream<Uint8Array>).getReader();
  let text = "";
  for (;;) {
    const { value: v, done } = await reader.read();
    if (done) throw new Error(`child exited: ${text}`);
    text += new TextDecoder().decode(v);
    const m = /PORT (\d+)\n[^\n]*(kv_tier\.resp:[^\n]*)\n/.exec(text);
    if (m) {
      reader.releaseLock();
      return { port: Number(m[1]), line: m[2]! };
    }
  }
}

async function respRound(port: number, size: number, n: number): Promise<{ setMBs: number; getMBs: number }> {
  const c = await BenchClient.connect(port);
  const v = value(size);
  let t = now();
  for (let i = 0; i < n; i++) await c.set(`k${i % 8}`, v);
  const setMs = now() - t;
  t = now();
  for (let i = 0; i < n; i++) {
    const got = await c.get(`k${i % 8}`);
    if (got !== size) throw new Error(`GET returned ${got} bytes`);
  }
  const getMs = now() - t;
  c.close();
  return { setMBs: mbps(size * n, setMs), getMBs: mbps(size * n, getMs) };
}

async function resp(): Promise<void> {
  // A port the kernel just handed out (a fixed pid-derived one collided with other processes' on the shared box).
  const rport = await freePort();
  const redis = spawn(["redis-server", "--port", String(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--proto-max-bulk-len", "1gb"], { stdout: "pipe" });
  const herd = spawn([process.execPath, join(import.meta.dir, "kv-tier", "resp-child.ts"), shm, disk, String(512 * MiB)], { stdout: "pipe" });
  try {
    const { port: hport, line } = await waitPort(herd);
    let up = false;
    for (let i = 0; i < 250 && !(up = spawnSync(["redis-cli", "-p", String(rport), "PING"]).stdout.toString().includes("PONG")); i++) await Bun.sleep(20);
    if (!up) throw new Error(`redis-server on ${rport} never answered PING (exit ${redis.exitCode}): ${redis.exitCode === null ? "" : await new Response(redis.stdout as ReadableStream).text()}`);
    console.log("1. RESP over loopback, one connection, request/reply; best of 5 alternating rounds (MiB/s; herd ÷ redis-server)");
    console.log(`   herd as shipped (defaults; ${line})`);
    for (const [size, n, warm] of [[MiB, 200, 20], [16 * MiB, 10, 4]] as const) {
      await respRound(hport, size, warm);
      await respRound(rport, size, warm);
      const best = { h: { setMBs: 0, getMBs: 0 }, r: { setMBs: 0, getMBs: 0 } };
      for (let round = 0; round < 5; round++) {
        // Alternate so both servers see the same (shared, noisy) machine.
        for (const [side, port] of [["h", hport], ["r", rport]] as const) {
          const x = await respRound(port, size, n);
          best[side].setMBs = Math.max(best[side].setMBs, x.setMBs);
          best[side].getMBs = Math.max(best[side].getMBs, x.getMBs);
        }
      }
      const { h, r } = best;
      const label = `${size / MiB} MiB`.padEnd(7);
      console.log(`   ${label} SET herd ${fmt(h.setMBs)}  redis ${fmt(r.setMBs)}  ratio ${(h.setMBs / r.setMBs).toFixed(2)}`);
      console.log(`   ${label} GET herd ${fmt(h.getMBs)}  redis ${fmt(r.getMBs)}  ratio ${(h.getMBs / r.getMBs).toFixed(2)}`);
    }
  } finally {
    herd.kill();
    redis.kill();
    await Promise.all([herd.exited, redis.exited]);
  }
}

function inProcess(): void {
  console.log("2. CPU tier in process (KvTier put/get: catalog row, no CRC-32 of shared memory, src/tier/README.md) vs buffer copy (MiB/s; tier ÷ copy)");
  const tier = KvTier.open({ catalogPath: join(disk, "inproc.sqlite"), cpu: { path: join(shm, "inproc"), capacityBytes: 512 * MiB }, clock: new RealClock(), bootId: "bench" });
  for (const [size, n] of [[MiB, 400], [16 * MiB, 40]] as const) {
    const v = value(size);
    // The baseline copies into 9 rotating buffers: the same working set as the tier's 8 live values
    // plus the one being replaced, so both pay the same cache misses.
    const dsts = Array.from({ length: 9 }, () => new Uint8Array(size).fill(1));
    // A get + copy-out reads one of 8 values that are not in cache, where the copy above reads the one
    // hot source `v`: `cold` copies from 8 rotating sources into the 9 destinations, the same memory
    // traffic as the get's copy-out (a second reference; the target's ratio stays against `copy`).
    const srcs = Array.from({ length: 8 }, () => value(size));
    const best = { copy: 0, put: 0, get: 0, cold: 0 };
    // Best of 7 rounds, each timing copy, put and get one after the other: on a box whose memory
    // bandwidth other processes share, one round's copy ran at 4.5–26 GB/s (issue 25 runs).
    for (let round = 0; round < 7; round++) {
      let t = now();
      for (let i = 0; i < n; i++) dsts[i % 9]!.set(v);
      best.copy = Math.max(best.copy, mbps(size * n, now() - t));
      t = now();
      for (let i = 0; i < n; i++) tier.put(`k${i % 8}`, v);
      best.put = Math.max(best.put, mbps(size * n, now() - t));
      t = now();
      for (let i = 0; i < n; i++) dsts[i % 9]!.set(tier.get(`k${i % 8}`)!); // a reader copies the bytes out
      best.get = Math.max(best.get, mbps(size * n, now() - t));
      t = now();
      for (let i = 0; i < n; i++) dsts[i % 9]!.set(srcs[i % 8]!);
      best.cold = Math.max(best.cold, mbps(size * n, now() - t));
    }
    const label = `${size / MiB} MiB`.padEnd(7);
    console.log(
      `   ${label} copy ${fmt(best.copy)}  put ${fmt(best.put)} (${(best.put / best.copy).toFixed(2)})  get+copy-out ${fmt(best.get)} (${(best.get / best.copy).toFixed(2)})` +
        `   [copy from 8 cold sources ${fmt(best.cold)}: get ÷ it ${(best.get / best.cold).toFixed(2)}]`,
    );
  }
  tier.close();
}

function ssd(): void {
  const fs = statfsSync(disk);
  console.log(`3. SSD tier vs dd oflag/iflag=direct, 16 MiB objects, 1 GiB (fs type 0x${fs.type.toString(16)}; MiB/s; tier ÷ dd)`);
  const n = 64;
  const v = value(16 * MiB);
  const m = new DirMedium(join(disk, "ssd"), 2048 * MiB);
  let t = now();
  const locs: string[] = [];
  for (let i = 0; i < n; i++) locs.push(m.write(v)!);
  const w = mbps(16 * MiB * n, now() - t);
  t = now();
  for (const l of locs) if (crc32(m.read(l, 16 * MiB)!) === 0) throw new Error("crc");
  const r = mbps(16 * MiB * n, now() - t);
  const ddFile = join(disk, "dd.bin");
  const dd = (args: string[]) => {
    const p = spawnSync(["dd", ...args, "bs=16M", `count=${n}`], { stderr: "pipe" });
    const m2 = /(\d+(?:\.\d+)?) s,/.exec(p.stderr.toString());
    return m2 ? mbps(16 * MiB * n, Number(m2[1]) * 1000) : NaN;
  };
  const ddW = dd(["if=/dev/zero", `of=${ddFile}`, "oflag=direct"]);
  const ddR = dd([`if=${ddFile}`, "of=/dev/null", "iflag=direct"]);
  console.log(`   write tier ${fmt(w)}  dd ${fmt(ddW)}  ratio ${(w / ddW).toFixed(2)}   (tier: O_DIRECT via an aligned staging copy, no fsync)`);
  console.log(`   read  tier ${fmt(r)}  dd ${fmt(ddR)}  ratio ${(r / ddR).toFixed(2)}   (tier: O_DIRECT, incl. CRC-32)`);
}

function catalog(): void {
  console.log(`4. Catalog with ${OBJECTS.toLocaleString("en")} objects`);
  const cat = new Catalog(join(disk, "big.sqlite"));
  let t = now();
  const BATCH = 50_000;
  for (let b = 0; b < OBJECTS; b += BATCH) {
    cat.tx(() => {
      for (let i = b; i < Math.min(OBJECTS, b + BATCH); i++) {
        cat.put({ key: `m@1@0@${i.toString(16)}@half`, tier: i % 4 === 0 ? "cpu" : "ssd", loc: `${i}`, size: 1 << 20, charged: 1 << 20, crc: i, created_ms: i, access_ms: i, hits: 0, model: "m" });
      }
    });
  }
  const loadS = (now() - t) / 1000;
  console.log(`   load ${fmt(OBJECTS / loadS)} rows/s (${loadS.toFixed(1)} s)`);
  const LOOK = 200_000;
  t = now();
  let found = 0;
  for (let i = 0; i < LOOK; i++) if (cat.get(`m@1@0@${((i * 7919) % OBJECTS).toString(16)}@half`)) found++;
  const lookS = (now() - t) / 1000;
  if (found !== LOOK) throw new Error(`lookups found ${found}`);
  console.log(`   lookups ${fmt(LOOK / lookS)} /s (random keys, hits)`);
  const ROUNDS = 2_000;
  t = now();
  for (let r = 0; r < ROUNDS; r++) {
    const victims = lru(cat.coldest("ssd", 64), 4 << 20, r);
    cat.tx(() => victims.forEach((k) => cat.delete(k)));
  }
  const evMs = (now() - t) / ROUNDS;
  console.log(`   eviction round (64 coldest via index, LRU picks 4 × 1 MiB, delete rows): ${(evMs * 1000).toFixed(0)} µs`);
  cat.close();
}

// KV_TIER_BENCH_ONLY=resp,inproc,ssd,catalog runs a subset (the 10M-object catalog alone takes minutes).
const only = new Set((process.env.KV_TIER_BENCH_ONLY ?? "resp,inproc,ssd,catalog").split(","));
try {
  if (only.has("resp")) await resp();
  if (only.has("inproc")) inProcess();
  if (only.has("ssd")) ssd();
  if (only.has("catalog")) catalog();
} finally {
  rmSync(shm, { recursive: true, force: true });
  rmSync(disk, { recursive: true, force: true });
}
