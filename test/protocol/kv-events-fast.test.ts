// The ingest fast path (readKvOps) against the reference decoder (decodeKvEventBatchPairs) on the
// same bytes: whenever the fast path takes a batch, the reference decodes it with no unknown or
// invalid part and to exactly the events the fast path's columns describe; whenever the reference
// fails, the fast path refuses. Seeded batches of every shape, then thousands of byte mutations.
import { describe, expect, test } from "bun:test";
import { Encoder } from "@msgpack/msgpack";
import { SeededRng } from "../../src/core/rng.ts";
import { decodeKvEventBatchPairs, type KvEventBatch } from "../../src/protocol/kv-events.ts";
import { KvOps, OP_CLEARED, OP_REMOVED, readKvOps } from "../../src/protocol/kv-events-fast.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import { genBatch, mutate, newGenState } from "./kv-batch-gen.ts";

const ops = new KvOps();
const pairsOf = (w: Uint32Array, from: number, n: number) => Array.from({ length: n }, (_, i) => (BigInt(w[2 * (from + i) + 1]!) << 32n) | BigInt(w[2 * (from + i)]!));

/** The fast path's columns as the events the reference yields (fields ingest uses). */
function eventsOf(o: KvOps): unknown[] {
  const out: unknown[] = [];
  for (let e = 0; e < o.n; e++) {
    const k = o.kind[e]!;
    if (k === OP_CLEARED) out.push({ type: "AllBlocksCleared" });
    else if (k === OP_REMOVED) out.push({ type: "BlockRemoved", hashes: pairsOf(o.hashes, o.hStart[e]!, o.hCount[e]!), medium: o.medium[e], groupIdx: o.group[e], locality: o.locality[e] });
    else
      out.push({
        type: "BlockStored",
        hashes: pairsOf(o.hashes, o.hStart[e]!, o.hCount[e]!),
        parent: o.hasParent[e] ? (BigInt(o.parentHi[e]!) << 32n) | BigInt(o.parentLo[e]!) : null,
        tokens: Array.from(o.tokens.subarray(o.tStart[e]!, o.tStart[e]! + o.tCount[e]!)),
        blockSize: o.blockSize[e],
        medium: o.medium[e],
        loraName: o.lora[e],
        cacheSalt: null,
        groupIdx: o.group[e],
        kind: o.specKind[e],
        locality: o.locality[e],
      });
  }
  return out;
}

function referenceEvents(b: KvEventBatch): unknown[] {
  return b.events.map((ev) => {
    if (ev.type === "AllBlocksCleared") return { type: ev.type };
    const hashes = pairsOf(ev.hashPairs!, 0, ev.hashPairs!.length >>> 1);
    if (ev.type === "BlockRemoved") return { type: ev.type, hashes, medium: ev.medium, groupIdx: ev.groupIdx, locality: ev.locality };
    return {
      type: ev.type, hashes, parent: ev.parentBlockHash, tokens: Array.from(ev.tokenIds), blockSize: ev.blockSize, medium: ev.medium,
      loraName: ev.loraName, cacheSalt: ev.cacheSalt, groupIdx: ev.groupIdx, kind: ev.kvCacheSpecKind, locality: ev.locality,
    };
  });
}

/** Compare on one payload; whether the fast path took it. */
function agree(bytes: Uint8Array): boolean {
  let ref: KvEventBatch | null = null;
  try {
    ref = decodeKvEventBatchPairs(bytes);
  } catch {
    ref = null;
  }
  const took = readKvOps(bytes, ops);
  if (!took) return false;
  expect(ref).not.toBeNull();
  expect(ref!.unknownEvents + ref!.unknownFields + ref!.invalidEvents).toBe(0);
  expect(ops.ts).toBe(ref!.ts);
  expect(eventsOf(ops)).toEqual(referenceEvents(ref!));
  return true;
}

describe("readKvOps (ingest fast path)", () => {
  test("takes the shapes engines send, as the reference decodes them", () => {
    const events = [
      blockStored({ blockHashes: [2n ** 64n - 1n, 2n ** 63n + 5n, 7n, 0n], parentBlockHash: 3n, tokenIds: Array.from({ length: 64 }, (_, i) => i * 1000), blockSize: 16 }),
      blockStored({ blockHashes: [9n], parentBlockHash: null, tokenIds: [1, 2, 3, 4], blockSize: 4, medium: "CPU", loraName: "x" }),
      blockRemoved([7n], "CPU_PINNED"),
      blockRemoved([2n ** 40n, 1n, 2n ** 64n - 2n]),
      { type: "AllBlocksCleared" as const },
    ];
    for (const f of ["array", "map"] as const) expect(agree(encodeKvEventBatch({ ts: 1.7e9, events }, f))).toBe(true);
  });

  test("refuses what it does not take (the reference then decodes it)", () => {
    const enc = new Encoder({ useBigInt64: true });
    const refused = (v: unknown) => expect(readKvOps(enc.encode(v), ops)).toBe(false);
    const st = { type: "BlockStored", block_hashes: [1], parent_block_hash: null, token_ids: [1, 2], block_size: 2, lora_id: null, medium: "GPU" };
    refused([1, [{ ...st, extra_keys: [["salt"]] }]]); // a salt among the extra keys
    refused([1, [{ ...st, cache_salt: "s" }]]);
    refused([1, [{ ...st, block_hashes: [new Uint8Array(32)] }]]); // a digest
    refused([1, [{ ...st, token_ids: [1, -2] }]]); // invalid: skipped and counted by the reference
    refused([1, [{ ...st, surprise: 1 }]]); // unknown key
    refused({ ts: 1, events: [st] }); // map envelope
    refused([1, [st], 0, 9]); // trailing envelope element
  });

  test("seeded batches and byte mutations: taken only when the reference agrees", () => {
    const rng = new SeededRng(2025);
    const st = newGenState();
    let took = 0;
    let refused = 0;
    let mutatedTook = 0;
    for (let i = 0; i < 1500; i++) {
      const bytes = genBatch(rng, st, 1.7e9 + i * 0.25);
      if (agree(bytes)) took++;
      else refused++;
      for (let m = 0; m < 3; m++) if (agree(mutate(rng, bytes))) mutatedTook++;
    }
    // Neither side is vacuous: most generated batches are taken, some are refused, and some
    // mutations (a hash or token rewritten into another valid int) are taken too.
    expect(took).toBeGreaterThan(300);
    expect(refused).toBeGreaterThan(100);
    expect(mutatedTook).toBeGreaterThan(100);
  });
});
