// The daemon-side KV consumer over real ZMTP sockets against the simulated engine's publisher
// (PUB + ROUTER replay, vLLM framing): events reach the index, dropped batches come back through
// replay, a publisher restart (sequence reset) clears and rebuilds, a worker that goes away leaves
// the index at once. Every test runs with ingest on this thread and on an ingest thread
// (kv_ingest.threads 0 and 1: the thread owns the sockets).
import { afterEach, beforeAll, describe, expect, test } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { createLogger } from "../../src/core/log.ts";
import type { Worker } from "../../src/workers/worker.ts";
import { emptyLoad } from "../../src/workers/worker.ts";
import type { KvEvent as SimKvEvent } from "../../src/engine/sim/blocks.ts";
import { SimKvPublisher } from "../../src/engine/sim/kv-publisher.ts";
import { KvConsumer, type KvWorkerSpec } from "../../src/kv/consumer.ts";
import { blockHashes } from "../../src/kv/hash.ts";

const BS = 4;
const log = createLogger("test", { level: "error" });
const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0)) f();
});

function publisher(opts: { port?: number; replayPort?: number; drop?: number; encoding?: "array" | "map"; seed?: number; replay?: boolean } = {}) {
  const p = new SimKvPublisher({
    config: {
      endpoint: `tcp://127.0.0.1:${opts.port ?? 0}`,
      replayEndpoint: opts.replay === false ? null : `tcp://127.0.0.1:${opts.replayPort ?? 0}`,
      topic: "kv@w0@m",
      bufferSteps: 1000,
      hwm: 1000,
    },
    encoding: opts.encoding ?? "map",
    dropFraction: opts.drop ?? 0,
    seed: opts.seed ?? 7,
    log,
    bind: true,
  });
  cleanup.push(() => p.close());
  return p;
}

let ingestThreads = 0;
function consumer() {
  const c = new KvConsumer({ clock: new RealClock(), log, replayTimeoutMs: 1000, ingestThreads });
  cleanup.push(() => c.close());
  return c;
}

function spec(p: SimKvPublisher, id = "n/sim-0"): KvWorkerSpec {
  return { id, model: "m", blockSize: BS, endpoint: p.endpoint, replayEndpoint: p.replayEndpoint ?? "", topic: "kv@w0@m" };
}

/** Token ids of a prompt with `n` blocks, distinct per `salt`. */
const tokens = (n: number, salt = 0) => Array.from({ length: n * BS }, (_, i) => 1000 * salt + i + 1);

/** One batch storing block i of `toks` (engine hash = base + i, parent = previous block). */
function storeBlock(toks: number[], i: number, base: bigint): SimKvEvent[] {
  return [{ type: "BlockStored", blockHashes: [base + BigInt(i)], parentBlockHash: i === 0 ? null : base + BigInt(i - 1), tokenIds: toks.slice(i * BS, (i + 1) * BS), blockSize: BS }];
}

async function until(what: string, fn: () => boolean, ms = 5000): Promise<void> {
  const t0 = performance.now();
  while (!fn()) {
    if (performance.now() - t0 > ms) throw new Error(`timed out: ${what}`);
    await Bun.sleep(10);
  }
}

const gpu = (c: KvConsumer, toks: number[], id = "n/sim-0") => c.overlaps(blockHashes(toks, BS)).get(id)?.gpu ?? 0;

function worker(id: string, state: Worker["state"], restarts = 0): Worker {
  return { id, node: "n", model: "m", role: "aggregated", kind: "sim", url: "http://x", state, load: emptyLoad(), restarts };
}

for (const threads of [0, 1])
  describe(`KvConsumer over ZMTP, kv_ingest.threads ${threads}`, () => {
  beforeAll(() => {
    ingestThreads = threads;
  });
  for (const encoding of ["map", "array"] as const) {
    test(`stored and removed blocks reach the index (${encoding} encoding)`, async () => {
      const p = publisher({ encoding });
      const c = consumer();
      c.add(spec(p));
      // (connected: the stream has seen its SUB come up; with an ingest thread, through a status snapshot)
      await until("subscriber", () => p.subscribers > 0 && c.status("n/sim-0")!.connected);
      const t = tokens(6);
      for (let i = 0; i < 6; i++) p.publish(storeBlock(t, i, 100n));
      await until("6 blocks", () => gpu(c, t) === 6);
      p.publish([{ type: "BlockRemoved", blockHashes: [103n] }]);
      await until("prefix cut at block 3", () => gpu(c, t) === 3);
      await until("status caught up", () => c.status("n/sim-0")!.last_seq === "6"); // a snapshot with threads
      const s = c.status("n/sim-0")!;
      expect(s.connected).toBe(true);
      expect(s.last_seq).toBe("6");
      expect(s.topic).toBe("kv@w0@m");
      p.publish([{ type: "AllBlocksCleared" }]);
      await until("cleared", () => gpu(c, t) === 0);
    });
  }

  test("dropped batches are recovered through replay", async () => {
    const p = publisher({ drop: 0.3, seed: 11 });
    const c = consumer();
    c.add(spec(p));
    await until("subscriber", () => p.subscribers > 0);
    await Bun.sleep(20); // let the subscription reach the publisher
    const t = tokens(40);
    for (let i = 0; i < 40; i++) p.publish(storeBlock(t, i, 500n));
    // A dropped last batch is only noticed when a later one arrives (as with vLLM): keep publishing
    // unrelated blocks until the stream has applied past the chain.
    let k = 0;
    await until("stream past seq 39", () => {
      const s = c.status("n/sim-0")!;
      if (s.last_seq !== null && BigInt(s.last_seq) >= 39n) return true;
      p.publish(storeBlock(tokens(1, 99 + k), 0, 9000n + BigInt(k++)));
      return false;
    });
    expect(p.stats.dropped).toBeGreaterThan(5);
    expect(gpu(c, t)).toBe(40);
    const s = c.status("n/sim-0")!;
    expect(s.gaps).toBeGreaterThan(0);
    expect(s.replays).toBeGreaterThan(0);
    expect(s.resyncs).toBe(0);
    expect(p.stats.replayRequests).toBeGreaterThan(0);
  });

  test("without a replay endpoint a gap clears the worker and it rebuilds from new events", async () => {
    const p = publisher({ drop: 0.5, seed: 3, replay: false });
    const c = consumer();
    c.add(spec(p));
    await until("subscriber", () => p.subscribers > 0);
    await Bun.sleep(20);
    const t = tokens(20);
    for (let i = 0; i < 20; i++) p.publish(storeBlock(t, i, 700n));
    await until("a resync", () => c.status("n/sim-0")!.resyncs > 0);
    // Whatever the index holds now is a prefix the engine really stored (never more than 20).
    expect(gpu(c, t)).toBeLessThanOrEqual(20);
  });

  test("a publisher restart (sequence back to 0) clears the worker and rebuilds", async () => {
    const p1 = publisher();
    const port = Number(p1.endpoint.split(":").pop());
    const replayPort = Number(p1.replayEndpoint!.split(":").pop());
    const c = consumer();
    c.add(spec(p1));
    await until("subscriber", () => p1.subscribers > 0);
    await Bun.sleep(20);
    const a = tokens(8, 1);
    for (let i = 0; i < 8; i++) p1.publish(storeBlock(a, i, 100n));
    await until("8 blocks", () => gpu(c, a) === 8);
    p1.close();
    const p2 = publisher({ port, replayPort });
    await until("resubscribed", () => p2.subscribers > 0);
    await Bun.sleep(20);
    const b = tokens(3, 2);
    for (let i = 0; i < 3; i++) p2.publish(storeBlock(b, i, 100n)); // same engine hashes, new content
    await until("new blocks", () => gpu(c, b) === 3);
    expect(gpu(c, a)).toBe(0);
    await until("restart counted", () => c.status("n/sim-0")!.restarts >= 1); // a snapshot with threads
  });

  test("failed/stopped workers leave the index at once; an engine restart starts a fresh stream", async () => {
    const p = publisher();
    const c = consumer();
    c.add(spec(p));
    c.observe(worker("n/sim-0", "ready"));
    await until("subscriber", () => p.subscribers > 0);
    await Bun.sleep(20);
    const t = tokens(5);
    for (let i = 0; i < 5; i++) p.publish(storeBlock(t, i, 100n));
    await until("5 blocks", () => gpu(c, t) === 5);
    // The engine died (ready → starting, restart count up): its cache is gone now.
    c.observe(worker("n/sim-0", "starting", 1));
    expect(gpu(c, t)).toBe(0);
    expect(c.status("n/sim-0")!.reattached).toBe(1);
    c.observe(worker("n/sim-0", "ready", 1));
    await until("resubscribed", () => c.status("n/sim-0")!.connected);
    await Bun.sleep(20); // let the subscription reach the publisher
    // The same (non-restarted) publisher continues at seq 5: the fresh stream asks for a replay from 0.
    p.publish(storeBlock(t, 0, 100n));
    await until("rebuilt from replay", () => gpu(c, t) === 5);
    c.observe(worker("n/sim-0", "failed", 1));
    expect(gpu(c, t)).toBe(0);
    expect(c.status("n/sim-0")!.connected).toBe(false);
    c.remove("n/sim-0");
    expect(c.status("n/sim-0")).toBeNull();
  });
});
