// End to end: herd's TierService (CPU tier + RESP server, in process) and simulated engines using it
// through --kv-offload-url. A prompt evicted from a small GPU KV cache comes back from the tier as
// cached tokens; the tier's keys feed the router's index (tier-key.ts) as medium cpu for the model's
// workers; the engine reports the offloaded blocks as KV events with medium "CPU" (vLLM's shape).
import { afterAll, expect, test } from "bun:test";
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { parseConfigText } from "../../src/config/index.ts";
import type { KvEvent } from "../../src/engine/sim/blocks.ts";
import { startSimEngine } from "../../src/engine/sim/server.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { TierService } from "../../src/tier/service.ts";
import { tierIndexFeed, tierIndexReplay } from "../../src/tier/tier-key.ts";
import { cleanupDirs, tempDirs } from "./helpers.ts";

afterAll(cleanupDirs);
const MAIN = resolve(import.meta.dir, "../../src/engine/sim/main.ts");
const seq = (from: number, n: number) => Array.from({ length: n }, (_, i) => from + i);
// 16-token blocks, 8 blocks of GPU KV: a 100-token prompt (6 full blocks) plus one output token
// takes 7, so the next such prompt evicts blocks 1..5 of the previous one (freed tail first).
const A = seq(10, 100);
const B = seq(300, 100);

async function tierService(index: BlockIndex, passwordFile = "") {
  const { shm, disk } = tempDirs();
  const pw = passwordFile ? `, password_file: ${passwordFile}` : "";
  const cfg = parseConfigText(`node: { data_dir: ${disk} }\nkv_tier:\n  cpu: { size: 4MiB, path: ${shm} }\n  resp: { listen: 127.0.0.1:0${pw} }\n`, "herd.yaml", { hostname: "h", dataDir: disk }).config!;
  const svc = new TierService({ config: cfg, clock: new RealClock(), bootId: "b1", onChange: tierIndexFeed(index, (m) => (m === "doc" ? ["w1", "w2"] : ["other"])) });
  await svc.start();
  return svc;
}

async function cached(url: string, prompt: number[]): Promise<number> {
  const r = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "doc", prompt, max_tokens: 1 }) });
  expect(r.status).toBe(200);
  const j = (await r.json()) as { usage: { prompt_tokens_details: { cached_tokens: number } } };
  return j.usage.prompt_tokens_details.cached_tokens;
}

async function until(what: string, ok: () => boolean): Promise<void> {
  for (let i = 0; i < 400 && !ok(); i++) await Bun.sleep(10);
  if (!ok()) throw new Error(`timed out waiting for ${what}`);
}

test("in-process engine: evicted blocks land in the tier, come back as cached, feed the index and CPU events", async () => {
  const index = new BlockIndex();
  const svc = await tierService(index);
  const events: KvEvent[] = [];
  const url = `resp://127.0.0.1:${svc.resp!.port}`;
  const e = await startSimEngine({ port: 0, model: "doc", zeroDelay: true, blockSize: 16, kvBlocks: 8, kvOffloadUrl: url, kvOffloadBytesPerBlock: 4096, onKvEvents: (ev) => events.push(...ev) });
  try {
    expect(e.offload!.connected).toBe(true);
    expect(await cached(e.url, A)).toBe(0);
    expect(await cached(e.url, B)).toBe(0);
    await until("5 offloaded blocks", () => e.offload!.counters.stored === 5);
    const herdA = blockHashes(A, 16);
    for (const h of herdA.slice(1, 6)) {
      expect(index.holds("w1", h, "cpu")).toBe(true);
      expect(index.holds("w2", h, "cpu")).toBe(true);
      expect(index.holds("other", h, "cpu")).toBe(false); // another model's engines cannot use it
    }
    // vLLM's offloading connector shape: engine hashes, no parent, no tokens, medium "CPU".
    const cpu = events.filter((x) => x.type === "BlockStored" && x.medium === "CPU");
    expect(cpu.length).toBe(5);
    expect(cpu[0]).toMatchObject({ parentBlockHash: null, tokenIds: [], blockSize: 16 });
    // A restarted daemon's empty index learns the same from the catalog.
    const replayed = new BlockIndex();
    tierIndexReplay(replayed, svc.tier!.entries(), (m) => (m === "doc" ? ["w1"] : []));
    for (const h of herdA.slice(1, 6)) expect(replayed.holds("w1", h, "cpu")).toBe(true);
    // GPU hit 1 block + 5 loaded from the tier.
    expect(await cached(e.url, A)).toBe(96);
    expect(e.offload!.counters).toMatchObject({ loadedBlocks: 5, loadedBytes: 5 * 4096, dropped: 0, storeFailed: 0 });
    const cpuTier = svc.figures().tiers.find((t) => t.tier === "cpu")!;
    expect(cpuTier.objects).toBeGreaterThanOrEqual(5);
    expect(cpuTier.hits).toBeGreaterThanOrEqual(5);
  } finally {
    await e.stop();
    await svc.stop();
  }
});

test("a block the tier lost is a miss (recomputed) and a BlockRemoved CPU event; a dead tier is a miss, never an error", async () => {
  const index = new BlockIndex();
  const svc = await tierService(index);
  const events: KvEvent[] = [];
  const e = await startSimEngine({ port: 0, model: "doc", zeroDelay: true, blockSize: 16, kvBlocks: 8, kvOffloadUrl: `resp://127.0.0.1:${svc.resp!.port}`, kvOffloadBytesPerBlock: 4096, onKvEvents: (ev) => events.push(...ev) });
  try {
    await cached(e.url, A);
    await cached(e.url, B);
    await until("offloads", () => e.offload!.counters.stored === 5);
    const herdA = blockHashes(A, 16);
    svc.tier!.delete(`herd:doc:${herdA[3]!.toString(16).padStart(16, "0")}`);
    expect(index.holds("w1", herdA[3]!, "cpu")).toBe(false);
    expect(await cached(e.url, A)).toBe(48); // blocks 0 (GPU), 1, 2 (tier); 3 is gone
    expect(events.filter((x) => x.type === "BlockRemoved" && x.medium === "CPU").length).toBe(1);
    await svc.stop();
    expect(await cached(e.url, B)).toBeGreaterThanOrEqual(0); // served without the tier
  } finally {
    await e.stop();
    await svc.stop();
  }
});

test("a real `herd sim-engine` process with --kv-offload-* flags uses the tier", async () => {
  const index = new BlockIndex();
  const svc = await tierService(index);
  const args = ["--port", "0", "--model", "doc", "--zero-delay", "--block-size", "16", "--kv-blocks", "8", "--kv-offload-url", `resp://127.0.0.1:${svc.resp!.port}`, "--kv-offload-bytes-per-block", "4096", "--kv-offload-load-gb-per-s", "10"];
  const child = spawn(process.execPath, [MAIN, ...args], { stdio: ["ignore", "pipe", "pipe"] });
  try {
    let out = "";
    child.stdout!.on("data", (d: Buffer) => void (out += d.toString()));
    await until("the engine's URL", () => /Starting vLLM API server 0 on (http:\/\/\S+)/.test(out));
    expect(out).toContain("KV offload to resp://127.0.0.1:");
    const url = /Starting vLLM API server 0 on (http:\/\/\S+)/.exec(out)![1]!;
    expect(await cached(url, A)).toBe(0);
    expect(await cached(url, B)).toBe(0);
    await until("5 blocks in the tier", () => svc.figures().tiers[0]!.objects === 5);
    expect(await cached(url, A)).toBe(96);
    expect(svc.figures().tiers[0]!.hits).toBe(5);
  } finally {
    child.kill("SIGTERM");
    await new Promise((r) => child.once("exit", r));
    await svc.stop();
  }
});

test("AUTH: --kv-offload-password-file authenticates; a wrong password leaves the engine serving without the tier", async () => {
  const { disk } = tempDirs();
  const good = join(disk, "pw");
  const bad = join(disk, "bad");
  writeFileSync(good, "s3cret\n");
  writeFileSync(bad, "nope\n");
  const svc = await tierService(new BlockIndex(), good);
  const url = `resp://127.0.0.1:${svc.resp!.port}`;
  const ok = await startSimEngine({ port: 0, model: "doc", zeroDelay: true, blockSize: 16, kvBlocks: 8, kvOffloadUrl: url, kvOffloadPasswordFile: good, kvOffloadBytesPerBlock: 4096 });
  const wrong = await startSimEngine({ port: 0, model: "doc", zeroDelay: true, blockSize: 16, kvBlocks: 8, kvOffloadUrl: url, kvOffloadPasswordFile: bad, kvOffloadBytesPerBlock: 4096 });
  try {
    expect(ok.offload!.connected).toBe(true);
    expect(wrong.offload!.connected).toBe(false);
    expect(wrong.offload!.counters.connectFailures).toBe(1);
    await cached(ok.url, A);
    await cached(ok.url, B);
    await until("offloads", () => ok.offload!.counters.stored === 5);
    expect(await cached(ok.url, A)).toBe(96);
    await cached(wrong.url, A);
    await cached(wrong.url, B);
    expect(await cached(wrong.url, A)).toBe(16);
    expect(wrong.offload!.counters.dropped).toBe(10); // A's blocks 1..5, then B's when A came back
  } finally {
    await ok.stop();
    await wrong.stop();
    await svc.stop();
  }
});
