// The NIXL metadata store alone under bench/soak.ts's hostile NIXL traffic (huge declared key
// lengths, 5,000-key SET floods, unread GETs), in this process instead of on the daemon's NIXL
// thread, so that what the store retains is in this heap: every --sample-s the live heap after a
// full collection (Bun.gc(true), bun:jsc heapStats) and the Map/Uint8Array counts are printed, with
// the least-squares trend after a warm-up. Written for the `--pd` soak's rising RSS floor
// (docs/benchmarks.md "Soak"): the daemon's heap figures cover its main thread only.
// Run: ./node_modules/.bin/bun bench/soak-nixl.ts [--seconds 240] [--sample-s 10]
import { heapStats } from "bun:jsc";
import { RealClock } from "../src/core/clock.ts";
import { createLogger } from "../src/core/log.ts";
import { SeededRng } from "../src/core/rng.ts";
import { NixlMetadataService } from "../src/pd/nixl-metadata.ts";
import { encodeBlob, encodeU32, VALIDATION_MAGIC } from "../src/pd/tcpstore-wire.ts";
import { rawConnect } from "../test/helpers/raw-socket.ts";

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SECONDS = arg("seconds", 240);
const SAMPLE_S = arg("sample-s", 10);
const rng = new SeededRng(22);
const store = new NixlMetadataService({ host: "127.0.0.1", port: 0, clock: new RealClock(), log: createLogger("nixl", { level: "error" }) });
store.start();
const port = store.port;
const enc = (s: string) => new TextEncoder().encode(s);
const deadline = performance.now() + SECONDS * 1000;

async function raw(payload: Uint8Array, holdMs: number, read = true): Promise<void> {
  const c = await rawConnect(port, { paused: !read }).catch(() => null);
  if (!c) return;
  c.sock.write(payload);
  await c.waitUntil(() => false, holdMs, 50);
  c.end();
}
const validate = Buffer.concat([Uint8Array.of(0), encodeU32(VALIDATION_MAGIC)]);
const u64 = (x: bigint) => {
  const b = new Uint8Array(8);
  new DataView(b.buffer).setBigUint64(0, x, true);
  return b;
};
async function hostile(): Promise<void> {
  while (performance.now() < deadline) {
    const r = rng.int(3);
    if (r === 0) await raw(Buffer.concat([validate, Uint8Array.of(1), u64(2n ** 62n)]), 2_000);
    else if (r === 1) await raw(Buffer.concat([validate, ...Array.from({ length: 5000 }, (_, i) => Buffer.concat([Uint8Array.of(1), encodeBlob(enc(`soak/${rng.int(1e9)}/${i}`)), encodeBlob(new Uint8Array(512))]))]), 2_000);
    else await raw(Buffer.concat([validate, ...Array.from({ length: 2000 }, () => Buffer.concat([Uint8Array.of(3), encodeBlob(enc("nope"))]))]), 5_000, false);
    await Bun.sleep(200);
  }
}

const points: { t: number; v: number }[] = [];
const t0 = performance.now();
const load = hostile();
while (performance.now() < deadline) {
  await Bun.sleep(SAMPLE_S * 1000);
  Bun.gc(true);
  const h = heapStats();
  const s = (performance.now() - t0) / 1000;
  points.push({ t: s / 60, v: h.heapSize / 1048576 });
  console.log(`t=${s.toFixed(0).padStart(4)} s  live heap ${(h.heapSize / 1048576).toFixed(1)} MiB  objects ${h.objectCount}  Uint8Array ${h.objectTypeCounts.Uint8Array ?? 0}  Map ${h.objectTypeCounts.Map ?? 0}  RSS ${(process.memoryUsage.rss() / 1048576).toFixed(0)} MiB`);
}
await load;
await Bun.sleep(11_000); // past the store's 10 s grace for closed connections' keys
Bun.gc(true);
const after = heapStats();
const post = points.filter((p) => p.t * 60 >= 30);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const tm = mean(post.map((p) => p.t));
const vm = mean(post.map((p) => p.v));
const slope = post.reduce((a, p) => a + (p.t - tm) * (p.v - vm), 0) / post.reduce((a, p) => a + (p.t - tm) ** 2, 0);
console.log(`live heap trend after 30 s: ${slope >= 0 ? "+" : ""}${slope.toFixed(2)} MiB/min over ${post.length} samples (mean ${vm.toFixed(1)} MiB); 11 s after the traffic: ${(after.heapSize / 1048576).toFixed(1)} MiB, Uint8Array ${after.objectTypeCounts.Uint8Array ?? 0}`);
store.stop();
process.exit(0);
