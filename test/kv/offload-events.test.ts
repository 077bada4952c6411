// vLLM's CPU tier in the index: with an OffloadingConnector on, vLLM publishes the blocks it copied
// to CPU as BlockStored(block_hashes = the GPU prefix cache's hashes, parent_block_hash=None,
// token_ids=[], lora_id=None, block_size = the offloaded block size (0 in newer vLLM),
// medium="CPU", lora_name=None) and their eviction as BlockRemoved(block_hashes, medium="CPU")
// (vllm offloading_connector.py take_events; CPULoadStoreSpec.medium()). Those batches are encoded
// here as vLLM's msgspec encoder writes them (map events: vLLM ≥ 0.24; positional: ≤ 0.23) and go
// through the real decoder and the per-worker ingest; the index must credit them as medium cpu.
import { describe, expect, test } from "bun:test";
import { Encoder } from "@msgpack/msgpack";
import { VirtualClock } from "../../src/core/clock.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { KvEventStream } from "../../src/kv/ingest.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { WorkerBlockMap } from "../../src/kv/worker-blocks.ts";
import { decodeKvEventBatch } from "../../src/protocol/kv-events.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";

const BS = 16;
const tokens = Array.from({ length: 4 * BS }, (_, i) => 7000 + i);
const ours = blockHashes(tokens, BS);
const eh = (i: number) => 0x5a00_0000_0000n + BigInt(i); // the engine's own block hashes
const enc = new Encoder({ useBigInt64: true });

/** One batch as vLLM writes it: [ts, [events…], data_parallel_rank]. */
const batch = (events: unknown[]) => enc.encode([1.7e9, events, 0]);

/** vLLM's GPU BlockStored (map form): the prefix cache's blocks with their tokens. */
const gpuStored = (from: number, to: number) => ({
  type: "BlockStored", block_hashes: Array.from({ length: to - from }, (_, k) => eh(from + k)), parent_block_hash: from > 0 ? eh(from - 1) : null,
  token_ids: tokens.slice(from * BS, to * BS), block_size: BS, lora_id: null, medium: "GPU", lora_name: null,
});
/** The OffloadingConnector's BlockStored for its CPU copies (map form). */
const cpuStored = (ids: number[], blockSize = BS) => ({
  type: "BlockStored", block_hashes: ids.map(eh), parent_block_hash: null, token_ids: [], block_size: blockSize, lora_id: null, medium: "CPU", lora_name: null,
});
const removed = (ids: number[], medium: string) => ({ type: "BlockRemoved", block_hashes: ids.map(eh), medium });

function ingest(...payloads: Uint8Array[]) {
  const index = new BlockIndex();
  const map = new WorkerBlockMap("w0", index, { blockSize: BS });
  for (const p of payloads) {
    const b = decodeKvEventBatch(p);
    expect(b.invalidEvents).toBe(0);
    for (const e of b.events) map.apply(e);
  }
  return { index, map };
}

describe("vLLM OffloadingConnector events credit the CPU tier", () => {
  test("a CPU BlockStored by hash alone is credited as medium cpu under herd's hashes", () => {
    const { index, map } = ingest(batch([gpuStored(0, 4)]), batch([cpuStored([0, 1, 2])]));
    for (const i of [0, 1, 2]) expect(index.holds("w0", ours[i]!, "cpu")).toBe(true);
    expect(index.holds("w0", ours[3]!, "cpu")).toBe(false);
    // Overlap is tiered (src/kv/README.md): the GPU run, then the CPU's continuation of it; the CPU
    // copies of blocks still on the GPU add nothing to this prompt's hit.
    expect(index.findMatches(ours).get("w0")).toEqual({ gpu: 4, cpu: 0, disk: 0 });
    expect(map.counters.unresolvedBlocks).toBe(0);
  });

  test("GPU eviction keeps the CPU credit; the CPU's own BlockRemoved takes it away", () => {
    const { index, map } = ingest(batch([gpuStored(0, 4)]), batch([cpuStored([0, 1, 2, 3])]), batch([removed([2, 3], "GPU")]));
    expect(index.findMatches(ours).get("w0")).toEqual({ gpu: 2, cpu: 2, disk: 0 }); // blocks 2, 3 from the CPU
    const b = decodeKvEventBatch(batch([removed([1, 2, 3], "CPU")]));
    for (const e of b.events) map.apply(e);
    expect(index.findMatches(ours).get("w0")).toEqual({ gpu: 2, cpu: 0, disk: 0 });
    expect(index.holds("w0", ours[0]!, "cpu")).toBe(true);
    expect(index.holds("w0", ours[2]!, "cpu")).toBe(false);
  });

  test("newer vLLM's block_size 0 decodes and is credited; positional (≤ 0.23) events too", () => {
    const zero = ingest(batch([gpuStored(0, 2)]), batch([cpuStored([0, 1], 0)]));
    for (const i of [0, 1]) expect(zero.index.holds("w0", ours[i]!, "cpu")).toBe(true);
    const positional = batch([["BlockStored", [eh(0)], null, tokens.slice(0, BS), BS, null, "GPU"], ["BlockStored", [eh(0)], null, [], BS, null, "CPU"]]);
    const pos = ingest(positional).index;
    expect(pos.holds("w0", ours[0]!, "cpu")).toBe(true);
    expect(pos.findMatches(ours).get("w0")).toEqual({ gpu: 1, cpu: 0, disk: 0 });
  });

  test("what cannot be placed is counted, never guessed", () => {
    // A hash the GPU never reported (joined mid-stream), and an offloaded block of 2 GPU blocks
    // (its hash names only the last of them).
    const { index, map } = ingest(batch([gpuStored(0, 2)]), batch([cpuStored([9])]), batch([cpuStored([1], 2 * BS)]));
    expect(index.findMatches(ours).get("w0")).toEqual({ gpu: 2, cpu: 0, disk: 0 });
    expect(map.counters.unresolvedBlocks).toBe(1);
    expect(map.counters.filtered).toBe(1);
    // block_size 0 with tokens is not a store by hash: the event is invalid.
    const bad = decodeKvEventBatch(batch([{ ...gpuStored(0, 1), block_size: 0 }]));
    expect(bad.invalidEvents).toBe(1);
  });
});

describe("through KvEventStream (the daemon's ingest path)", () => {
  // The stream decodes hashes as u32 pairs (fast path or decodeKvEventBatchPairs); the by-hash
  // store used to be recognised only when hashes came as bigints, so the live path never credited
  // the CPU tier (the blocks were counted as truncated instead).
  for (const fastPath of [true, false]) {
    test(`a CPU store by hash alone is credited (fast path ${fastPath ? "on" : "off"})`, () => {
      const index = new BlockIndex();
      const s = new KvEventStream("w0", index, { clock: new VirtualClock(), blockSize: BS, fastPath });
      const f = (seq: number, events: unknown[]) => [new Uint8Array(0), seqFrame(BigInt(seq)), batch(events)];
      s.message(f(0, [gpuStored(0, 4)]));
      s.message(f(1, [cpuStored([0, 1, 2, 3], 0)]));
      s.message(f(2, [removed([2, 3], "GPU")]));
      expect(index.findMatches(ours).get("w0")).toEqual({ gpu: 2, cpu: 2, disk: 0 });
      expect(s.status().blocks.truncatedBlocks).toBe(0);
    });
  }
});
