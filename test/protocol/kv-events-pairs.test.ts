// decodeKvEventBatchPairs (the ingest decode: block hashes as u32 halves, no BigInt per block)
// against decodeKvEventBatch on the same bytes: every field, counter and error agrees, and the
// pairs are the bigint hashes split. Seeded mutations cover odd encodings (negative ints, int64,
// bytes digests, mixed lists, truncation) the encoder never writes.
import { describe, expect, test } from "bun:test";
import { Encoder } from "@msgpack/msgpack";
import { SeededRng } from "../../src/core/rng.ts";
import { decodeKvEventBatch, decodeKvEventBatchPairs, type KvEventBatch } from "../../src/protocol/kv-events.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";

const enc = new Encoder({ useBigInt64: true });

/** The pairs form turned back into the bigint form. */
function unpair(b: KvEventBatch): KvEventBatch {
  return {
    ...b,
    events: b.events.map((e) => {
      if (e.type === "AllBlocksCleared") return e;
      const { hashPairs, ...rest } = e;
      expect(hashPairs).toBeInstanceOf(Uint32Array);
      expect(e.blockHashes).toEqual([]);
      const hs: bigint[] = [];
      for (let i = 0; i < hashPairs!.length; i += 2) hs.push((BigInt(hashPairs![i + 1]!) << 32n) | BigInt(hashPairs![i]!));
      return { ...rest, blockHashes: hs } as typeof e;
    }),
  };
}

function same(bytes: Uint8Array): void {
  let want: KvEventBatch | Error;
  let got: KvEventBatch | Error;
  try {
    want = decodeKvEventBatch(bytes);
  } catch (e) {
    want = e as Error;
  }
  try {
    got = unpair(decodeKvEventBatchPairs(bytes));
  } catch (e) {
    got = e as Error;
  }
  if (want instanceof Error) {
    expect(got).toBeInstanceOf(Error);
    expect((got as Error).message).toBe(want.message);
    return;
  }
  expect(got).not.toBeInstanceOf(Error);
  const norm = (b: KvEventBatch) => JSON.parse(JSON.stringify(b, (_, v) => (typeof v === "bigint" ? `n${v}` : v instanceof Uint32Array ? Array.from(v) : v)));
  expect(norm(got as KvEventBatch)).toEqual(norm(want));
}

describe("decodeKvEventBatchPairs", () => {
  test("agrees with decodeKvEventBatch on both formats and odd hash encodings", () => {
    const events = [
      blockStored({ blockHashes: [2n ** 64n - 1n, 2n ** 63n + 5n, 7n, 0n], parentBlockHash: 3n, tokenIds: Array.from({ length: 64 }, (_, i) => i * 1000), blockSize: 16 }),
      blockStored({ blockHashes: [9n], parentBlockHash: null, tokenIds: [1, 2, 3, 4], blockSize: 4 }),
      blockRemoved([7n], "CPU_PINNED"),
      blockRemoved([2n ** 40n, 1n, 2n ** 64n - 2n]),
      { type: "AllBlocksCleared" as const },
    ];
    for (const f of ["array", "map"] as const) same(encodeKvEventBatch({ ts: 1.7e9, events }, f));
    // Signed hashes of every width, a digest, a mixed list, short and negative token lists.
    same(enc.encode([1.5, [{ type: "BlockRemoved", block_hashes: [-1, -200, -40000, -3_000_000_000, -(2n ** 62n), 5], medium: "GPU" }]]));
    same(enc.encode([1.5, [{ type: "BlockRemoved", block_hashes: [new Uint8Array(32).fill(3), 4], medium: null }]]));
    same(enc.encode([1.5, [{ type: "BlockStored", block_hashes: [new Uint8Array(32).fill(3)], parent_block_hash: null, token_ids: [1, 2], block_size: 2 }]]));
    same(enc.encode([1.5, [{ type: "BlockStored", block_hashes: [1], parent_block_hash: null, token_ids: [1, -2], block_size: 2 }]]));
    same(enc.encode([1.5, [["BlockRemoved", [2n ** 63n], "GPU"], [1, 2], 3], 0]));
    same(enc.encode([1, 2]));
    same(enc.encode([1.5, [1, 2, 3]]));
  });

  test("seeded byte mutations decode identically or fail identically", () => {
    const rng = new SeededRng(25);
    const base = encodeKvEventBatch({ ts: 1.7e9, events: [blockStored({ blockHashes: [2n ** 63n + 5n, 7n], parentBlockHash: 3n, tokenIds: Array.from({ length: 32 }, (_, i) => i), blockSize: 16 }), blockRemoved([7n, 2n ** 50n])] }, "map");
    const heads = [0xcf, 0xd3, 0xd2, 0xd1, 0xd0, 0xcc, 0xcd, 0xce, 0xff, 0xe0, 0x00, 0x91, 0xc4];
    for (let k = 0; k < 3000; k++) {
      const b = Uint8Array.from(base);
      for (let m = 1 + rng.int(3); m > 0; m--) b[rng.int(b.length)] = rng.int(2) ? heads[rng.int(heads.length)]! : rng.int(256);
      same(b);
    }
  });
});
