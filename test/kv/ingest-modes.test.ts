// One suite, every ingest implementation (src/kv/ingest-manager.ts KvIngestApi): KvIngest on the
// calling thread, and ThreadedKvIngest with 1 and 2 ingest threads (router.kv_events.ingest_threads).
// Each mode is fed the same frames through injected sources and must end with the same index
// residencies and the same stream counters as the single-threaded reference; then the threaded
// mode's own duties: bounded op queue (the thread stalls, counted), a thread that dies is replaced
// and its workers' streams restart, and its threads answer memory questions.
import { afterEach, describe, expect, test } from "bun:test";
import { RealClock, VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { KvIngest, type KvIngestApi } from "../../src/kv/ingest-manager.ts";
import type { KvEventSink, KvEventSource, KvReplayer, KvStreamStatus, ReplayBatch } from "../../src/kv/ingest.ts";
import { ThreadedKvIngest } from "../../src/kv/threaded-ingest.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import type { KvEvent } from "../../src/protocol/kv-events.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";
import { memoryLogger } from "../helpers/log.ts";
import { genBatch, mutate, newGenState } from "../protocol/kv-batch-gen.ts";

type Mode = { name: string; make(ix: BlockIndex, o?: { maxInflightWords?: number; log?: ReturnType<typeof memoryLogger> }): KvIngestApi };
const MODES: Mode[] = [
  { name: "main thread", make: (ix) => new KvIngest(ix, new RealClock()) },
  { name: "1 ingest thread", make: (ix, o = {}) => new ThreadedKvIngest(ix, o.log, { threads: 1, ...(o.maxInflightWords ? { maxInflightWords: o.maxInflightWords } : {}) }) },
  { name: "2 ingest threads", make: (ix, o = {}) => new ThreadedKvIngest(ix, o.log, { threads: 2, ...(o.maxInflightWords ? { maxInflightWords: o.maxInflightWords } : {}) }) },
];

class FakeSource implements KvEventSource {
  sink: KvEventSink | null = null;
  start(sink: KvEventSink): void {
    this.sink = sink;
  }
  close(): void {
    this.sink = null;
  }
}

function residencies(ix: BlockIndex): string[] {
  const out: string[] = [];
  ix.forEachEntry((w, h, m) => out.push(`${w} ${h} ${m}`));
  return out.sort();
}

/** A stream's status without the receive time (the threads use their own clock). */
const counters = (s: KvStreamStatus | undefined) => (s ? { ...s, lastMessageMs: null } : s);
const frame = (seq: number, payload: Uint8Array) => [new Uint8Array(0), seqFrame(BigInt(seq)), payload];
const settle = async (kv: KvIngestApi) => {
  for (let i = 0; i < 5; i++) await new Promise((r) => setTimeout(r, 1));
  await kv.sync();
};

const BS = 4;
const tokens = Array.from({ length: 40 }, (_, i) => 500 + i);
const ours = blockHashes(tokens, BS);
const eh = (i: number) => 1000n + BigInt(i);
const store = (from: number, to: number): KvEvent =>
  blockStored({ blockHashes: Array.from({ length: to - from }, (_, k) => eh(from + k)), parentBlockHash: from > 0 ? eh(from - 1) : null, tokenIds: tokens.slice(from * BS, to * BS), blockSize: BS });
const batch = (seq: number, events: KvEvent[], ts = 1000 + seq) => frame(seq, encodeKvEventBatch({ ts, events }, "map"));

let open: KvIngestApi[] = [];
afterEach(() => {
  for (const kv of open) kv.close();
  open = [];
});

for (const mode of MODES) {
  describe(`KV ingest over ${mode.name}`, () => {
    const make = (ix: BlockIndex, o?: Parameters<Mode["make"]>[1]) => {
      const kv = mode.make(ix, o);
      open.push(kv);
      return kv;
    };

    test("every event shape, mutated bytes among them, 4 workers: the reference's residencies and counters", async () => {
      const ix = new BlockIndex();
      const kv = make(ix);
      const ref = new KvIngest(new BlockIndex(), new VirtualClock());
      const refIx = ref.index as BlockIndex;
      const rng = new SeededRng(7);
      const srcs = [0, 1, 2, 3].map((w) => {
        const s = new FakeSource();
        const r = new FakeSource();
        kv.addWorker(`w${w}`, s, null);
        ref.addWorker(`w${w}`, r, null);
        return { s, r, st: newGenState(), seq: 0 };
      });
      for (let i = 0; i < 800; i++) {
        const x = srcs[rng.int(4)]!;
        let payload = genBatch(rng, x.st, 1.7e9 + i);
        if (rng.int(6) === 0) payload = mutate(rng, payload);
        const f = frame(x.seq++, payload);
        x.s.sink!.message(f);
        x.r.sink!.message(f);
      }
      await settle(kv);
      expect(residencies(ix)).toEqual(residencies(refIx));
      for (let w = 0; w < 4; w++) expect(counters(kv.stream(`w${w}`)?.status())).toEqual(counters(ref.stream(`w${w}`)?.status()));
      expect(ix.stats().entries).toBeGreaterThan(20);
    });

    test("a gap is filled by the replay; duplicates are dropped; a gap without replay resyncs", async () => {
      const ix = new BlockIndex();
      const kv = make(ix);
      const a = new FakeSource();
      const held: ReplayBatch[] = [{ seq: 1n, payload: batch(1, [store(2, 4)])[2]! }];
      const replayer: KvReplayer = { replay: (start) => Promise.resolve(held.filter((b) => b.seq >= start)) };
      kv.addWorker("a", a, replayer);
      a.sink!.message(batch(0, [store(0, 2)]));
      a.sink!.message(batch(2, [store(4, 6)])); // seq 1 lost
      a.sink!.message(batch(2, [store(4, 6)])); // and a duplicate
      await settle(kv);
      await settle(kv);
      expect(ix.findMatches(ours).get("a")?.gpu).toBe(6);
      const s = kv.stream("a")!.status();
      expect([s.gaps, s.replays, s.resyncs, s.duplicates, s.lastSeq]).toEqual([1, 1, 0, 1, "2"]);

      const b = new FakeSource();
      kv.addWorker("b", b, null);
      b.sink!.message(batch(0, [store(0, 2)]));
      b.sink!.message(batch(5, [store(0, 1)])); // a hole and no replay: cleared, rebuilt from seq 5
      await settle(kv);
      expect(kv.stream("b")!.status().resyncs).toBe(1);
      expect(ix.findMatches(ours).get("b")?.gpu).toBe(1);
    });

    test("a publisher restart clears the worker; removal and re-adding start clean", async () => {
      const ix = new BlockIndex();
      const kv = make(ix);
      const a = new FakeSource();
      kv.addWorker("a", a, null);
      a.sink!.message(batch(0, [store(0, 3)]));
      a.sink!.message(batch(1, [blockRemoved([eh(2)])]));
      await settle(kv);
      expect(ix.findMatches(ours).get("a")?.gpu).toBe(2);
      a.sink!.message(batch(0, [store(0, 1)], 5000)); // seq back, newer ts
      await settle(kv);
      expect(kv.stream("a")!.status().restarts).toBe(1);
      expect(ix.findMatches(ours).get("a")?.gpu).toBe(1);
      a.sink!.message(batch(1, [store(1, 5)], 5001));
      kv.removeWorker("a"); // at once, whatever is in flight
      expect(ix.findMatches(ours).has("a")).toBe(false);
      await settle(kv);
      expect(ix.findMatches(ours).has("a")).toBe(false);
      const again = new FakeSource();
      kv.addWorker("a", again, null);
      again.sink!.message(batch(0, [store(0, 2)]));
      await settle(kv);
      expect(ix.findMatches(ours).get("a")?.gpu).toBe(2);
    });
  });
}

describe("ThreadedKvIngest", () => {
  test("ops beyond the in-flight bound make the thread wait (counted); nothing is lost", async () => {
    const ix = new BlockIndex();
    const kv = new ThreadedKvIngest(ix, undefined, { threads: 1, maxInflightWords: 1 });
    open.push(kv);
    const a = new FakeSource();
    kv.addWorker("a", a, null);
    // Relay 10 batches, then keep this thread busy: the ingest thread flushes each batch's ops
    // (> 1 word each) and must wait for them to be applied.
    const blocks = 10;
    for (let i = 0; i < blocks; i++) a.sink!.message(batch(i, [store(i, i + 1)]));
    const until = performance.now() + 150;
    while (performance.now() < until) {}
    await settle(kv);
    expect(ix.findMatches(ours).get("a")?.gpu).toBe(blocks);
    const [t] = kv.threadFigures();
    expect(t!.stalls).toBeGreaterThan(0);
    expect(t!.blocksApplied).toBe(blocks);
  });

  test("relayed messages beyond the bound are dropped, counted, and seen by the stream as a gap", async () => {
    const ix = new BlockIndex();
    const kv = new ThreadedKvIngest(ix, undefined, { threads: 1, maxRelayedMessages: 2 });
    open.push(kv);
    const a = new FakeSource();
    kv.addWorker("a", a, null);
    for (let i = 0; i < 10; i++) a.sink!.message(batch(i, [store(i, i + 1)])); // none applied yet: all in flight
    await settle(kv);
    expect(kv.threadFigures()[0]!.relayDropped).toBe(8);
    a.sink!.message(batch(10, [store(0, 1)])); // after the hole: no replay, so a resync
    await settle(kv);
    const s = kv.stream("a")!.status();
    expect([s.batchesApplied, s.gaps, s.resyncs]).toEqual([3, 1, 1]);
    expect(ix.findMatches(ours).get("a")?.gpu).toBe(1);
  });

  test("a thread that dies is logged, replaced, and its workers' streams start afresh", async () => {
    const ix = new BlockIndex();
    const log = memoryLogger();
    const kv = new ThreadedKvIngest(ix, log, { threads: 1 });
    open.push(kv);
    const a = new FakeSource();
    kv.addWorker("a", a, null);
    a.sink!.message(batch(0, [store(0, 3)]));
    await settle(kv);
    expect(ix.findMatches(ours).get("a")?.gpu).toBe(3);
    kv.failThread(0);
    for (let i = 0; i < 50 && kv.threadFigures()[0]!.restarts === 0; i++) await new Promise((r) => setTimeout(r, 10));
    expect(kv.threadFigures()[0]!.restarts).toBe(1);
    expect(log.lines.some((l) => l.includes("kv ingest thread died"))).toBe(true);
    expect(ix.findMatches(ours).has("a")).toBe(false); // its engine-hash map died with it
    a.sink!.message(batch(0, [store(0, 2)])); // the same source feeds the new thread
    await settle(kv);
    expect(ix.findMatches(ours).get("a")?.gpu).toBe(2);
  });

  test("each thread answers GET /admin/debug/memory's question", async () => {
    const kv = new ThreadedKvIngest(new BlockIndex(), undefined, { threads: 2 });
    open.push(kv);
    const answers = await Promise.all(kv.threads().map((t) => t.memory(false, 5_000)));
    expect(kv.threads().map((t) => t.name)).toEqual(["kv-ingest-0", "kv-ingest-1"]);
    for (const a of answers) expect("heap_used_bytes" in a && a.heap_used_bytes > 0).toBe(true);
  });
});
