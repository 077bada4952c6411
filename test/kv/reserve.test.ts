// Capacity hints: a worker's engine-hash map and the shared index are sized up front for the
// engine's KV capacity, within a budget, and sized again after a clear shrank them. Results are
// covered differentially in convergence.test.ts; here the bounds and the daemon's hint parsing.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { createLogger } from "../../src/core/log.ts";
import { kvCapacityHint } from "../../src/engine/drivers/registry.ts";
import { planEngines } from "../../src/engine/plan.ts";
import type { EnginePlan } from "../../src/engine/types.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { clampCapacity, MAX_RESERVED_BLOCKS, type KvEventSink } from "../../src/kv/ingest.ts";
import { KvIngest } from "../../src/kv/ingest-manager.ts";
import { KvConsumer } from "../../src/kv/consumer.ts";
import type { KvEvent } from "../../src/protocol/kv-events.ts";
import { blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";
import { engine, model, testConfig } from "../fixtures/engines/config.ts";

const BS = 4;
const tokens = Array.from({ length: 40 }, (_, i) => 700 + i);
const ours = blockHashes(tokens, BS);
const store: KvEvent = blockStored({
  blockHashes: ours.map((_, i) => 5000n + BigInt(i)),
  parentBlockHash: null,
  tokenIds: tokens,
  blockSize: BS,
  medium: "GPU",
});
const cleared: KvEvent = { type: "AllBlocksCleared" } as KvEvent;
const frames = (seq: number, events: KvEvent[]) => [new Uint8Array(0), seqFrame(BigInt(seq)), encodeKvEventBatch({ ts: 1000 + seq, events }, "map")];

function add(ingest: KvIngest, worker: string, capacityBlocks?: number) {
  let sink: KvEventSink | null = null;
  const stream = ingest.addWorker(worker, { start: (s) => void (sink = s), close: () => {} }, null, {
    blockSize: BS,
    ...(capacityBlocks !== undefined ? { capacityBlocks } : {}),
  });
  return { stream, sink: () => sink! };
}

describe("capacity hints", () => {
  test("unusable hints reserve nothing; a bogus one is capped", () => {
    for (const bad of [undefined, NaN, -5, 0, 0.5, Infinity]) expect(clampCapacity(bad)).toBe(0);
    expect(clampCapacity(5.7)).toBe(5);
    expect(clampCapacity(1e12)).toBe(MAX_RESERVED_BLOCKS);
    // Through the real path: the worker's map is sized for the cap, not for 2^53 blocks.
    const ingest = new KvIngest(new BlockIndex(), new VirtualClock());
    const { stream } = add(ingest, "w", Number.MAX_SAFE_INTEGER);
    expect(stream.reservedBlocks).toBe(MAX_RESERVED_BLOCKS);
    expect(stream.blocks.bytes()).toBeLessThan(MAX_RESERVED_BLOCKS * 34); // 20-byte slots at 60 % load
    expect(ingest.index.stats().bytes!).toBeLessThan(MAX_RESERVED_BLOCKS * 34);
    ingest.close();
  });

  test("all workers' reservations share one budget; removal frees it", () => {
    const index = new BlockIndex();
    const ingest = new KvIngest(index, new VirtualClock(), undefined, { maxReservedBlocks: 10_000 });
    expect(add(ingest, "a", 6_000).stream.reservedBlocks).toBe(6_000);
    expect(add(ingest, "b", 6_000).stream.reservedBlocks).toBe(4_000); // what is left
    expect(add(ingest, "c", 100).stream.reservedBlocks).toBe(0); // budget spent: grows as before
    expect(ingest.reservedBlocks()).toBe(10_000);
    // The index is sized for the sum: 10,000 blocks at ≤ 75 % load, 20-byte slots.
    expect(index.stats().bytes!).toBeGreaterThanOrEqual((10_000 / 0.75) * 20);
    ingest.removeWorker("a");
    expect(ingest.reservedBlocks()).toBe(4_000);
    expect(add(ingest, "d", 7_000).stream.reservedBlocks).toBe(6_000);
    ingest.close();
    expect(ingest.reservedBlocks()).toBe(0);
  });

  test("a hinted worker is sized again after AllBlocksCleared; an unhinted one works alongside", () => {
    const index = new BlockIndex();
    const ingest = new KvIngest(index, new VirtualClock());
    const hinted = add(ingest, "hinted", 50_000);
    const plain = add(ingest, "plain");
    const reservedBytes = hinted.stream.blocks.bytes();
    expect(reservedBytes).toBeGreaterThanOrEqual((50_000 / 0.75) * 20);
    expect(plain.stream.blocks.bytes()).toBeLessThan(reservedBytes / 100);
    for (const w of [hinted, plain]) w.sink().message(frames(0, [store]));
    const m = index.findMatches(ours);
    expect([m.get("hinted")?.gpu, m.get("plain")?.gpu]).toEqual([10, 10]);
    hinted.sink().message(frames(1, [cleared]));
    expect(index.findMatches(ours).get("hinted")).toBeUndefined();
    expect(hinted.stream.blocks.bytes()).toBe(reservedBytes);
    // The clear shrank the mostly empty index; it is sized again for the hinted capacity.
    expect(index.stats().bytes!).toBeGreaterThanOrEqual((50_000 / 0.75) * 20);
    hinted.sink().message(frames(2, [store]));
    expect(index.findMatches(ours).get("hinted")?.gpu).toBe(10);
    expect(hinted.stream.status().mappedBlocks).toBe(10);
    ingest.close();
  });
});

test("KvConsumer passes a spec's kvBlocks to its stream; a spec without one reserves nothing", () => {
  const c = new KvConsumer({
    clock: new VirtualClock(),
    log: createLogger("test", { level: "error" }),
    connect: () => ({ source: { start: () => {}, close: () => {} }, replayer: null }),
  });
  const spec = { model: "m", blockSize: BS, endpoint: "tcp://127.0.0.1:1", replayEndpoint: "", topic: "" };
  c.add({ ...spec, id: "a", kvBlocks: 1_000 });
  c.add({ ...spec, id: "b" });
  expect([c.ingest.stream("a")!.reservedBlocks, c.ingest.stream("b")!.reservedBlocks]).toEqual([1_000, 0]);
  expect(c.ingest.reservedBlocks()).toBe(1_000);
  c.close();
});

describe("kvCapacityHint (engine driver registry)", () => {
  const plan = (kind: EnginePlan["kind"], argv: string[] | null) =>
    ({ kind, spec: argv === null ? null : { argv } }) as unknown as Pick<EnginePlan, "kind" | "spec">;
  const self = ["/usr/bin/bun", "/work/main/src/cli.ts"];
  test("sim engines: --kv-blocks, or the sim's default", () => {
    expect(kvCapacityHint(plan("sim", [...self, "sim-engine", "--port", "8001", "--kv-blocks", "5000"]))).toBe(5000);
    expect(kvCapacityHint(plan("sim", [...self, "sim-engine", "--kv-blocks=777", "--block-size", "16"]))).toBe(777);
    expect(kvCapacityHint(plan("sim", [...self, "sim-engine", "--port", "8001"]))).toBe(24_700);
    expect(kvCapacityHint(plan("sim", [...self, "sim-engine", "--kv-blocks", "many"]))).toBeUndefined();
  });
  test("on the planner's real command lines: the sim's default, or entry args", () => {
    const plans = planEngines(
      testConfig({
        models: [model({ name: "m", block_size: 16 })],
        engines: [engine({ kind: "sim", model: "m" }), engine({ kind: "sim", model: "m", args: ["--kv-blocks", "3000"] })],
        supervisor: { port_range_start: 9000 },
      }),
      { self: ["/usr/local/bin/herd"], isPortFree: () => true },
    );
    expect(plans.map((p) => [Boolean(p.kvEvents), kvCapacityHint(p)])).toEqual([[true, 24_700], [true, 3_000]]);
  });
  test("vLLM: --num-gpu-blocks-override; otherwise (and for external engines) no hint", () => {
    expect(kvCapacityHint(plan("vllm", ["vllm", "serve", "m", "--num-gpu-blocks-override", "123"]))).toBe(123);
    expect(kvCapacityHint(plan("vllm", ["vllm", "serve", "m", "--num-gpu-blocks-override=456"]))).toBe(456);
    expect(kvCapacityHint(plan("vllm", ["vllm", "serve", "m"]))).toBeUndefined();
    expect(kvCapacityHint(plan("external", null))).toBeUndefined();
  });
});
