// Same tree, two SET paths (issue 25): herd's RESP server over a KvTier with the value parsed straight
// into its shared-memory slot (`slot`, TierStore.reserve) and over the same tier without `reserve`
// (`scratch`: the parser's buffer, then put()'s copy). Two server processes, one client connection each,
// 12 alternating rounds of 100 SETs of 1 MiB; prints every round's MiB/s and the medians.
// Run: ./node_modules/.bin/bun bench/kv-tier/set-path.ts   (child role: set-path.ts serve <shm> <disk> <slot|scratch>)
import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { spawn } from "bun";
import { waitUrl } from "../lib/child.ts";
import { RealClock } from "../../src/core/clock.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import type { TierStore } from "../../src/tier/store.ts";
import { KvTier } from "../../src/tier/tier.ts";
import { BenchClient } from "./client.ts";

const MiB = 1024 * 1024;
const [role, shm, disk, mode] = process.argv.slice(2);

function serve(): void {
  const tier = KvTier.open({ catalogPath: join(disk!, "catalog.sqlite"), cpu: { path: shm!, capacityBytes: 512 * MiB }, clock: new RealClock(), bootId: "bench" });
  const plain: TierStore = { put: (k, d) => tier.put(k, d), get: (k) => tier.get(k), has: (k) => tier.has(k), delete: (k) => tier.delete(k), list: (n) => tier.list(n) };
  const s = new RespServer({ host: "127.0.0.1", port: 0, store: mode === "slot" ? tier : plain });
  s.start();
  console.log(`PORT ${s.port}`);
}

const portOf = async (p: ReturnType<typeof spawn>): Promise<number> => Number(await waitUrl(p, /PORT (\d+)/, "server", "stdout"));

async function main(): Promise<void> {
  const id = `herd-set-path-${process.pid}`;
  const modes = ["slot", "scratch"] as const;
  const dirs = modes.map((m) => ({ shm: join("/dev/shm", `${id}-${m}`), disk: join("/tmp", `${id}-${m}`) }));
  for (const d of dirs) mkdirSync(d.disk, { recursive: true });
  const kids = modes.map((m, i) => spawn([process.execPath, import.meta.path, "serve", dirs[i]!.shm, dirs[i]!.disk, m], { stdout: "pipe" }));
  try {
    const ports = await Promise.all(kids.map(portOf));
    const v = new Uint8Array(MiB);
    crypto.getRandomValues(v.subarray(0, 65536));
    const got: number[][] = [[], []];
    for (let round = 0; round < 12; round++) {
      for (let i = 0; i < 2; i++) {
        const c = await BenchClient.connect(ports[i]!);
        const t = performance.now();
        for (let n = 0; n < 100; n++) await c.set(`k${n % 8}`, v);
        got[i]!.push(100 / ((performance.now() - t) / 1000));
        c.close();
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
    console.log("RESP SET 1 MiB, same tree: value into its tier slot vs parser scratch + put (MiB/s per round)");
    modes.forEach((m, i) => console.log(`   ${m.padEnd(8)} ${got[i]!.map((x) => x.toFixed(0)).join(" ")}  median ${median(got[i]!).toFixed(0)}`));
    console.log(`   slot ÷ scratch (medians) ${(median(got[0]!) / median(got[1]!)).toFixed(2)}`);
  } finally {
    for (const k of kids) k.kill();
    await Promise.all(kids.map((k) => k.exited));
    for (const d of dirs) for (const p of [d.shm, d.disk]) rmSync(p, { recursive: true, force: true });
  }
}

if (role === "serve") serve();
else await main();
