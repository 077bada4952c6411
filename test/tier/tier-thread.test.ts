// The KV tier on its own thread (kv_tier.thread: worker, issue 22): the daemon's uses of the tier —
// RESP, GET /admin/kv-tier figures, /metrics, the change feed to the KV index, index replay, peer
// reads (GET /cluster/v1/tier/<key>), puts of objects fetched from peers, and local misses asked of
// the peers — all work through messages.
import { afterAll, expect, test } from "bun:test";
import { Registry } from "prom-client";
import { RealClock } from "../../src/core/clock.ts";
import { parseConfigText } from "../../src/config/index.ts";
import type { TierChange } from "../../src/tier/index-feed.ts";
import { TierService } from "../../src/tier/service.ts";
import { cleanupDirs, tempDirs, valueOf } from "./helpers.ts";
import { cmd, transcript } from "./resp-helpers.ts";

afterAll(cleanupDirs);

test("a tier on its own thread: RESP, figures, metrics, change feed, replay, peer reads and puts, remote misses", async () => {
  const { shm, disk } = tempDirs();
  const cfg = parseConfigText(`node: { data_dir: ${disk} }\nkv_tier:\n  cpu: { size: 4MiB, path: ${shm} }\n  resp: { listen: 127.0.0.1:0 }\n`, "herd.yaml", { hostname: "h", dataDir: disk });
  const changes: TierChange[] = [];
  const asked: string[] = [];
  const remoteValue = valueOf("far", 0, 1000);
  const svc = new TierService({
    config: cfg.config!,
    clock: new RealClock(),
    thread: true,
    bootId: "b1",
    onChange: (c) => changes.push(c),
    remote: { available: () => true, get: async (k) => (asked.push(k), k === "far" ? remoteValue : null) },
  });
  await svc.start();
  expect(svc.tier).toBeUndefined(); // not on this thread
  const port = svc.respPort!;
  expect(port).toBeGreaterThan(0);
  const v = valueOf("k", 0, 5000);
  const r = await transcript(port, Buffer.concat([cmd("SET", "k", v), cmd("GET", "k"), cmd("GET", "far"), cmd("EXISTS", "nowhere")]), (b) => b.toString("latin1").endsWith(":0\r\n"));
  const text = r.bytes.toString("latin1");
  expect(text.startsWith("+OK\r\n$5000\r\n")).toBe(true);
  expect(text).toContain("$1000\r\n");
  expect(asked).toEqual(["far", "nowhere"]);
  for (let i = 0; i < 50 && changes.length === 0; i++) await Bun.sleep(10);
  expect(changes[0]).toEqual({ kind: "stored", tier: "cpu", key: "k" });

  const hit = await svc.peerGet("k");
  expect(hit && Buffer.from(hit.data).equals(Buffer.from(v))).toBe(true);
  expect(await svc.peerGet("missing")).toBeNull();
  expect(svc.put("from-peer", valueOf("p", 0, 100))).toBe(true);
  const f = await svc.freshFigures();
  expect(f.tiers[0]!.objects).toBe(2);
  expect(f.resp!.commands).toBe(4);
  expect((await svc.entries()).map((e) => e.key).sort()).toEqual(["from-peer", "k"]);

  // The thread's own heap, asked through the same channel (GET /admin/debug/memory).
  const mem = await svc.threadMemory!.memory(true, 10_000);
  expect("error" in mem ? mem.error : mem.gc).toBe(true);
  if (!("error" in mem)) expect(mem.object_count).toBeGreaterThan(0);
  expect(svc.threadMemory!.name).toBe("kv-tier");

  const registry = new Registry();
  svc.registerMetrics(registry);
  expect(await registry.metrics()).toMatch(/herd_kv_tier_objects\{tier="cpu"\} 2/);
  const thread = svc.threadMemory!;
  await svc.stop();
  expect(svc.respPort).toBeNull();
  expect(svc.threadMemory).toBeNull();
  expect(await thread.memory(true, 10_000)).toEqual({ error: "not_running" });
  // Stopped means stopped: the port is closed and the lock released, so a restart opens the same data.
  await svc.start();
  expect((await svc.entries()).length).toBe(2);
  await svc.stop();
});

test("a tier thread that cannot start rejects start() with the tier's own message", async () => {
  const { disk } = tempDirs();
  const cfg = parseConfigText(`node: { data_dir: ${disk} }\nkv_tier:\n  cpu: { size: 1GiB, path: /proc/herd-no-such-dir }\n`, "herd.yaml", { hostname: "h", dataDir: disk });
  const svc = new TierService({ config: cfg.config!, clock: new RealClock(), thread: true, bootId: "b1" });
  await expect(svc.start()).rejects.toThrow(/kv_tier|ENOENT|EACCES|no such|permission|read-only/i);
  await svc.stop();
});
