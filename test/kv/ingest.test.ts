import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { KvEventStream, type KvReplayer, type ReplayBatch } from "../../src/kv/ingest.ts";
import { KvIngest } from "../../src/kv/ingest-manager.ts";
import { WorkerBlockMap } from "../../src/kv/worker-blocks.ts";
import type { KvEvent } from "../../src/protocol/kv-events.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";

const BS = 4;
const tokens = Array.from({ length: 40 }, (_, i) => 500 + i);
const ours = blockHashes(tokens, BS);
const eh = (i: number) => 1000n + BigInt(i); // the engine's own block hashes

/** A store of blocks [from, to) of `tokens`, named by the engine as eh(i). */
function store(from: number, to: number, medium = "GPU"): KvEvent {
  return blockStored({
    blockHashes: Array.from({ length: to - from }, (_, k) => eh(from + k)),
    parentBlockHash: from > 0 ? eh(from - 1) : null,
    tokenIds: tokens.slice(from * BS, to * BS),
    blockSize: BS,
    medium,
  });
}

function frames(seq: number, events: KvEvent[], ts = 1000 + seq): Uint8Array[] {
  return [new Uint8Array(0), seqFrame(BigInt(seq)), encodeKvEventBatch({ ts, events }, "map")];
}

const gpu = (ix: BlockIndex, w = "w") => ix.findMatches(ours).get(w)?.gpu ?? 0;
const flush = async () => {
  for (let i = 0; i < 5; i++) await Promise.resolve();
};

describe("WorkerBlockMap", () => {
  test("maps engine hashes to chained token hashes; children resolve through the parent's engine hash", () => {
    const ix = new BlockIndex();
    const m = new WorkerBlockMap("w", ix);
    m.apply(store(0, 3));
    m.apply(store(3, 5));
    expect(ix.findMatches(ours).get("w")).toEqual({ gpu: 5, cpu: 0, disk: 0 });
    m.apply(blockRemoved([eh(4)]));
    expect(gpu(ix)).toBe(4);
    expect(m.blockSize).toBe(BS);
  });

  test("skips children of unknown parents and counts them", () => {
    const ix = new BlockIndex();
    const m = new WorkerBlockMap("w", ix);
    m.apply(store(3, 5));
    expect(ix.size()).toBe(0);
    expect(m.counters.parentMissing).toBe(1);
  });

  test("tracks media separately and drops the mapping only when the last medium goes", () => {
    const ix = new BlockIndex();
    const m = new WorkerBlockMap("w", ix);
    m.apply(store(0, 2));
    m.apply(store(0, 2, "CPU_PINNED"));
    m.apply(blockRemoved([eh(0), eh(1)], "GPU"));
    expect(ix.findMatches(ours).get("w")).toEqual({ gpu: 0, cpu: 2, disk: 0 });
    m.apply(store(2, 3, "DISK")); // parent eh(1) still known through the CPU copy
    expect(ix.findMatches(ours).get("w")).toEqual({ gpu: 0, cpu: 2, disk: 1 }); // disk continues the CPU run
    expect(ix.holds("w", ours[2]!, "disk")).toBe(true);
    m.apply(blockRemoved([eh(0), eh(1)], "CPU"));
    expect(m.size).toBe(1);
    m.apply(blockRemoved([eh(0)], "CPU"));
    expect(m.counters.unknownRemovals).toBe(1);
  });

  test("two engine hashes naming the same tokens hold the block until both are removed", () => {
    const ix = new BlockIndex();
    const m = new WorkerBlockMap("w", ix);
    m.apply(store(0, 1));
    m.apply(blockStored({ blockHashes: [77n], parentBlockHash: null, tokenIds: tokens.slice(0, BS), blockSize: BS })); // e.g. another cache_salt
    m.apply(blockRemoved([eh(0)]));
    expect(gpu(ix)).toBe(1);
    m.apply(blockRemoved([77n]));
    expect(gpu(ix)).toBe(0);
  });

  test("filters REMOTE locality, non-main KV groups and other block sizes; unknown media are counted", () => {
    const ix = new BlockIndex();
    const m = new WorkerBlockMap("w", ix, { blockSize: BS });
    m.apply({ ...(store(0, 1) as Extract<KvEvent, { type: "BlockStored" }>), locality: "REMOTE" });
    m.apply({ ...(store(0, 1) as Extract<KvEvent, { type: "BlockStored" }>), groupIdx: 1, kvCacheSpecKind: "sliding_window" });
    m.apply({ ...(store(0, 1) as Extract<KvEvent, { type: "BlockStored" }>), groupIdx: 2 }); // unlearned non-zero group
    m.apply(blockStored({ blockHashes: [5n], parentBlockHash: null, tokenIds: tokens.slice(0, 8), blockSize: 8 }));
    m.apply(store(0, 1, "QUANTUM"));
    expect(ix.size()).toBe(0);
    expect(m.counters.filtered).toBe(4);
    expect(m.counters.unknownMedium).toBe(1);
    m.apply({ ...(store(0, 2) as Extract<KvEvent, { type: "BlockStored" }>), groupIdx: 3, kvCacheSpecKind: "full_attention" });
    expect(gpu(ix)).toBe(2);
    m.apply({ type: "BlockRemoved", blockHashes: [eh(1)], medium: "GPU", groupIdx: 1, locality: null }); // sliding-window group
    expect(gpu(ix)).toBe(2);
  });

  test("AllBlocksCleared empties the worker and only that worker", () => {
    const ix = new BlockIndex();
    const a = new WorkerBlockMap("a", ix);
    const b = new WorkerBlockMap("b", ix);
    a.apply(store(0, 3));
    b.apply(store(0, 2));
    a.apply({ type: "AllBlocksCleared" });
    expect(gpu(ix, "a")).toBe(0);
    expect(gpu(ix, "b")).toBe(2);
    expect(a.size).toBe(0);
  });

  test("LoRA stores index under the adapter's hashes", () => {
    const ix = new BlockIndex();
    const m = new WorkerBlockMap("w", ix);
    m.apply({ ...(store(0, 2) as Extract<KvEvent, { type: "BlockStored" }>), loraName: "sql" });
    expect(ix.findMatches(ours).size).toBe(0);
    expect(ix.findMatches(blockHashes(tokens, BS, "sql")).get("w")?.gpu).toBe(2);
  });
});

/** A replayer over a list of batches, answering when the test says so. */
function manualReplayer() {
  const requests: { start: bigint; resolve: (b: ReplayBatch[]) => void; reject: (e: Error) => void }[] = [];
  const replayer: KvReplayer = {
    replay: (start) => new Promise((resolve, reject) => requests.push({ start, resolve, reject })),
  };
  return { replayer, requests };
}

const batch = (seq: number, events: KvEvent[], ts = 1000 + seq): ReplayBatch => ({
  seq: BigInt(seq),
  payload: encodeKvEventBatch({ ts, events }, "array"),
});

describe("KvEventStream", () => {
  test("applies in order, drops duplicates and stale reordered messages", () => {
    const ix = new BlockIndex();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock() });
    s.message(frames(0, [store(0, 2)]));
    s.message(frames(1, [store(2, 3)]));
    s.message(frames(1, [store(2, 3)]));
    s.message(frames(0, [store(0, 2)]));
    expect(gpu(ix)).toBe(3);
    expect(s.status()).toMatchObject({ lastSeq: "1", duplicates: 2, batchesApplied: 2, gaps: 0, resyncs: 0, restarts: 0 });
  });

  test("a gap asks the replay endpoint from last+1 and fills the hole", async () => {
    const ix = new BlockIndex();
    const { replayer, requests } = manualReplayer();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock(), replayer });
    s.message(frames(0, [store(0, 2)]));
    s.message(frames(3, [store(4, 5)]));
    s.message(frames(4, [store(5, 6)]));
    expect(requests.map((r) => r.start)).toEqual([1n]);
    expect(gpu(ix)).toBe(2);
    requests[0]!.resolve([batch(1, [store(2, 3)]), batch(2, [store(3, 4)]), batch(3, [store(4, 5)]), batch(4, [store(5, 6)])]);
    await flush();
    expect(gpu(ix)).toBe(6);
    expect(s.status()).toMatchObject({ lastSeq: "4", gaps: 1, replays: 1, resyncs: 0, pendingBatches: 0, replayInFlight: false });
  });

  test("a late reordered message repairs the gap before the replay answers", async () => {
    const ix = new BlockIndex();
    const { replayer, requests } = manualReplayer();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock(), replayer });
    s.message(frames(0, [store(0, 1)]));
    s.message(frames(2, [store(2, 3)]));
    s.message(frames(1, [store(1, 2)]));
    expect(gpu(ix)).toBe(3);
    requests[0]!.resolve([batch(1, [store(1, 2)]), batch(2, [store(2, 3)])]);
    await flush();
    expect(s.status()).toMatchObject({ lastSeq: "2", resyncs: 0, batchesApplied: 3 });
  });

  test("a replay that no longer holds the gap clears the worker and rebuilds from newer events", async () => {
    const ix = new BlockIndex();
    const { replayer, requests } = manualReplayer();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock(), replayer });
    s.message(frames(0, [store(0, 4)]));
    s.message(frames(5, [store(0, 1, "CPU")])); // seq 1..4 lost; one of them may have evicted blocks
    requests[0]!.resolve([batch(3, []), batch(4, []), batch(5, [store(0, 1, "CPU")])]);
    await flush();
    expect(ix.findMatches(ours).get("w")).toEqual({ gpu: 0, cpu: 1, disk: 0 });
    expect(s.status()).toMatchObject({ lastSeq: "5", resyncs: 1, gaps: 1 });
  });

  test("replay timeout and replay errors resync; no replay endpoint resyncs at once", async () => {
    const clock = new VirtualClock();
    const ix = new BlockIndex();
    const { replayer, requests } = manualReplayer();
    const s = new KvEventStream("w", ix, { clock, replayer, replayTimeoutMs: 100 });
    s.message(frames(0, [store(0, 3)]));
    s.message(frames(2, []));
    clock.advance(100);
    expect(s.status()).toMatchObject({ resyncs: 1, replayFailures: 1, lastSeq: "2" });
    expect(gpu(ix)).toBe(0);
    requests[0]!.resolve([batch(1, [])]); // too late: ignored
    await flush();
    s.message(frames(4, []));
    requests[1]!.reject(new Error("socket closed"));
    await flush();
    expect(s.status()).toMatchObject({ resyncs: 2, replayFailures: 2, lastSeq: "4" });

    const ix2 = new BlockIndex();
    const s2 = new KvEventStream("w", ix2, { clock });
    s2.message(frames(0, [store(0, 3)]));
    s2.message(frames(2, [store(0, 1, "CPU")]));
    expect(s2.status()).toMatchObject({ gaps: 1, resyncs: 1, lastSeq: "2" });
    expect(ix2.findMatches(ours).get("w")).toEqual({ gpu: 0, cpu: 1, disk: 0 });
  });

  test("seq going backwards with a newer timestamp is a restart: clear, then replay the new stream from 0", async () => {
    const ix = new BlockIndex();
    const { replayer, requests } = manualReplayer();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock(), replayer });
    for (let i = 0; i < 5; i++) s.message(frames(i, i === 0 ? [store(0, 4)] : []));
    s.message(frames(2, [store(1, 2)], 5000)); // new process already at seq 2, we missed 0 and 1
    expect(gpu(ix)).toBe(0);
    expect(requests.map((r) => r.start)).toEqual([0n]);
    requests[0]!.resolve([batch(0, [store(0, 1)], 4998), batch(1, [], 4999), batch(2, [store(1, 2)], 5000)]);
    await flush();
    expect(gpu(ix)).toBe(2);
    expect(s.status()).toMatchObject({ restarts: 1, lastSeq: "2", resyncs: 0 });
  });

  test("after a reconnect any discontinuity is a restart", () => {
    const ix = new BlockIndex();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock() });
    s.connection(true);
    s.message(frames(0, [store(0, 3)]));
    s.message(frames(1, []));
    s.connection(false);
    s.connection(true);
    s.message(frames(0, [store(0, 1)], 500)); // same seq, *older* ts: only the reconnect tells
    expect(s.status()).toMatchObject({ restarts: 1, lastSeq: "0" });
    expect(gpu(ix)).toBe(1);
  });

  test("joining mid-stream replays from 0; a buffer that starts later is accepted after a resync", async () => {
    const ix = new BlockIndex();
    const { replayer, requests } = manualReplayer();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock(), replayer });
    s.message(frames(7, [store(2, 3)]));
    expect(requests[0]!.start).toBe(0n);
    requests[0]!.resolve([batch(5, [store(0, 1)]), batch(6, [store(1, 2)]), batch(7, [store(2, 3)])]);
    await flush();
    expect(gpu(ix)).toBe(3);
    expect(s.status()).toMatchObject({ lastSeq: "7", resyncs: 1 });
  });

  test("too many batches waiting for a gap resync instead of growing without bound", () => {
    const ix = new BlockIndex();
    const { replayer } = manualReplayer();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock(), replayer, maxPendingBatches: 3 });
    s.message(frames(0, [store(0, 2)]));
    for (let i = 2; i < 6; i++) s.message(frames(i, []));
    expect(s.status()).toMatchObject({ resyncs: 1, pendingBatches: 0, lastSeq: "5", replayInFlight: false });
  });

  test("malformed messages and undecodable payloads are counted, never thrown", () => {
    const ix = new BlockIndex();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock() });
    s.message(frames(0, [store(0, 2)]));
    s.message([new Uint8Array(0), new Uint8Array(3), new Uint8Array(1)]);
    s.message([new Uint8Array(0)]);
    s.message([new Uint8Array(0), seqFrame(1n), Uint8Array.of(0xc7, 0x01, 0x05, 0x00)]);
    expect(s.status()).toMatchObject({ malformedMessages: 2, decodeErrors: 1, lastSeq: "1" });
    expect(gpu(ix)).toBe(0); // the lost batch's effect is unknown: cleared
  });
});

describe("KvIngest", () => {
  test("removing a worker drops its blocks at once and closes its source", () => {
    const ix = new BlockIndex();
    const ingest = new KvIngest(ix, new VirtualClock());
    let closed = 0;
    const sinks: { message(f: Uint8Array[]): void }[] = [];
    const source = { start: (sink: { message(f: Uint8Array[]): void }) => void sinks.push(sink), close: () => void closed++ };
    ingest.addWorker("a", source, null);
    ingest.addWorker("b", source, null);
    sinks[0]!.message(frames(0, [store(0, 3)]));
    sinks[1]!.message(frames(0, [store(0, 1)]));
    expect(ingest.status().map((s) => [s.worker, s.lastSeq])).toEqual([["a", "0"], ["b", "0"]]);
    ingest.removeWorker("a");
    expect(gpu(ix, "a")).toBe(0);
    expect(gpu(ix, "b")).toBe(1);
    expect(closed).toBe(1);
    sinks[0]!.message(frames(1, [store(0, 3)])); // a late message from the closed source
    expect(gpu(ix, "a")).toBe(0);
    expect(ingest.status()).toHaveLength(1);
  });
});
