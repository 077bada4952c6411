// Two herd trees' RESP servers (resp-child.ts of each), GET of one value size over loopback, one
// client per server, alternating rounds, best of 9: an A/B of a change to the GET path against a copy
// of the tree before it (docs/benchmarks.md, HELPERS rule "copy main's tree").
// Run: bun bench/kv-tier/resp-ab.ts <tree A (before)> <tree B (after)>   (KV_TIER_AB_BYTES, default 1 MiB)
import { spawn } from "bun";
import { join } from "node:path";
import { rmSync, mkdirSync } from "node:fs";
import { BenchClient } from "./client.ts";
const MiB = 1 << 20;
async function start(root: string, tag: string) {
  const shm = `/dev/shm/tier-ab-${tag}-${process.pid}`, disk = `/tmp/tier-ab-${tag}-${process.pid}`;
  mkdirSync(disk, { recursive: true });
  const p = spawn([process.execPath, join(root, "bench/kv-tier/resp-child.ts"), shm, disk, String(256 * MiB)], { stdout: "pipe" });
  const r = (p.stdout as ReadableStream<Uint8Array>).getReader();
  let t = "";
  for (;;) { const { value } = await r.read(); t += new TextDecoder().decode(value); const m = /PORT (\d+)/.exec(t); if (m) return { p, port: Number(m[1]), shm, disk }; }
}
const [rootA, rootB] = process.argv.slice(2);
if (!rootA || !rootB) throw new Error("usage: bun bench/kv-tier/resp-ab.ts <tree before> <tree after>");
const a = await start(rootA, "b"), b = await start(rootB, "a");
const size = Number(process.env.KV_TIER_AB_BYTES ?? MiB), n = size > MiB ? 20 : 200;
const val = new Uint8Array(size).fill(3);
const best = { before: 0, after: 0 };
const ca = await BenchClient.connect(a.port), cb = await BenchClient.connect(b.port);
for (const c of [ca, cb]) for (let i = 0; i < 8; i++) await c.set(`k${i}`, val);
for (let r = 0; r < 9; r++) for (const [side, c] of [["before", ca], ["after", cb]] as const) {
  const t = performance.now();
  for (let i = 0; i < n; i++) if ((await c.get(`k${i % 8}`)) !== size) throw new Error("size");
  best[side] = Math.max(best[side], (size * n) / MiB / ((performance.now() - t) / 1000));
}
console.log(`GET ${size / MiB} MiB, MiB/s best of 9: A ${rootA} ${best.before.toFixed(0)}, B ${rootB} ${best.after.toFixed(0)}, B ÷ A ${(best.after / best.before).toFixed(2)}`);
ca.close(); cb.close(); a.p.kill(); b.p.kill(); await Promise.all([a.p.exited, b.p.exited]);
for (const x of [a, b]) { rmSync(x.shm, { recursive: true, force: true }); rmSync(x.disk, { recursive: true, force: true }); }
