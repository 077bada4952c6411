// The reader's packed-u32 fast path (token-id lists → Uint32Array) must decode exactly what the
// generic path decodes, reject exactly what it rejects, and fall back on any non-u32 element.
import { describe, expect, test } from "bun:test";
import { Decoder, Encoder } from "@msgpack/msgpack";
import { SeededRng } from "../../src/core/rng.ts";
import { decodeKvEventBatch, type BlockStored } from "../../src/protocol/kv-events.ts";
import { blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import { MsgpackRejected, readMsgpack } from "../../src/protocol/msgpack-read.ts";

const PACK = { packUint32MinLength: 8 };
const enc = new Encoder({ useBigInt64: true });

/** Uint32Array → Array, recursively: the packed result compared to the generic one. */
function unpack(v: unknown): unknown {
  if (v instanceof Uint32Array) return Array.from(v);
  if (Array.isArray(v)) return v.map(unpack);
  if (v !== null && typeof v === "object" && !(v instanceof Uint8Array)) {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, unpack(x)]));
  }
  return v;
}

function outcome(bytes: Uint8Array, opts?: typeof PACK): { ok: unknown } | { err: string } {
  try {
    return { ok: unpack(readMsgpack(bytes, undefined, opts)) };
  } catch (e) {
    expect(e).toBeInstanceOf(MsgpackRejected);
    return { err: (e as Error).message };
  }
}

describe("msgpack reader: packed u32 arrays", () => {
  test("u32 lists in every uint encoding come back as a Uint32Array with the same values", () => {
    const xs = [0, 1, 127, 128, 255, 256, 65535, 65536, 150_000, 2 ** 32 - 1];
    const v = readMsgpack(enc.encode(xs), undefined, PACK);
    expect(v).toBeInstanceOf(Uint32Array);
    expect(Array.from(v as Uint32Array)).toEqual(xs);
    expect(readMsgpack(enc.encode(xs))).toEqual(xs); // off by default
  });

  test("shorter lists and lists with any other element decode generically", () => {
    expect(readMsgpack(enc.encode([1, 2, 3, 4, 5, 6, 7]), undefined, PACK)).toEqual([1, 2, 3, 4, 5, 6, 7]);
    for (const odd of [-1, 1.5, 2 ** 32, 2n ** 63n, "x", null, [1], new Uint8Array(1)]) {
      for (const at of [0, 4, 9]) {
        const xs: unknown[] = Array.from({ length: 10 }, (_, i) => i * 1000);
        xs[at] = odd;
        const v = readMsgpack(enc.encode(xs), undefined, PACK);
        expect(Array.isArray(v)).toBe(true);
        expect(v).toEqual(new Decoder({ useBigInt64: true }).decode(enc.encode(xs)) as unknown[]);
      }
    }
    // Signed encodings of non-negative values (int8..int32) are not packed but read the same.
    const signed = Uint8Array.from([0x98, ...Array.from({ length: 8 }, () => [0xd2, 0, 0, 1, 0]).flat()]);
    expect(readMsgpack(signed, undefined, PACK)).toEqual(new Array(8).fill(256));
  });

  test("truncated packed lists are rejected like the generic path, at the same byte", () => {
    const bytes = enc.encode(Array.from({ length: 40 }, (_, i) => i * 7919));
    for (let cut = 0; cut < bytes.length; cut++) {
      const b = bytes.subarray(0, cut);
      expect(outcome(b, PACK)).toEqual(outcome(b));
    }
  });

  test("5,000 seeded mutations of token-list payloads: same accept/reject and same values as generic", () => {
    const rng = new SeededRng(4242);
    const base = [
      enc.encode({ token_ids: Array.from({ length: 64 }, (_, i) => (i * 2654435761) >>> 0), block_hashes: [1n << 63n, 5n] }),
      encodeKvEventBatch({ ts: 1.7e9, events: [blockStored({ blockHashes: [1n, 2n], parentBlockHash: null, tokenIds: Array.from({ length: 32 }, (_, i) => i * 3000), blockSize: 16 })] }, "array"),
    ];
    let accepted = 0;
    for (let i = 0; i < 5000; i++) {
      let b = Uint8Array.from(base[rng.int(base.length)]!);
      for (let k = 1 + rng.int(3); k > 0; k--) {
        const r = rng.int(3);
        if (r === 0 && b.length) b[rng.int(b.length)] = rng.int(256);
        else if (r === 1 && b.length) b[rng.int(b.length)] = [0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd2, 0xc7, 0xc1, 0xdc, 0xdd, 0x7f][rng.int(11)]!;
        else b = b.subarray(0, rng.int(b.length + 1));
      }
      const packed = outcome(b, PACK);
      expect(packed).toEqual(outcome(b));
      if ("ok" in packed) accepted++;
    }
    expect(accepted).toBeGreaterThan(100);
  });
});

describe("KV events with packed lists", () => {
  const tokens = Array.from({ length: 48 }, (_, i) => (i * 40503) % 151_000);

  test("token ids of 8+ decode as a Uint32Array with the encoded values, in both formats", () => {
    for (const format of ["array", "map"] as const) {
      const events = [blockStored({ blockHashes: [1n, 2n, 3n], parentBlockHash: 9n, tokenIds: tokens, blockSize: 16 })];
      const b = decodeKvEventBatch(encodeKvEventBatch({ ts: 1, events }, format));
      const ev = b.events[0] as BlockStored;
      expect(ev.tokenIds).toBeInstanceOf(Uint32Array);
      expect({ ...ev, tokenIds: Array.from(ev.tokenIds) } as unknown).toEqual(events[0]! as unknown);
      expect(b.unknownFields + b.unknownEvents + b.invalidEvents).toBe(0);
    }
  });

  test("8+ small engine hashes (packed by the reader) still decode to bigints", () => {
    const hashes = Array.from({ length: 10 }, (_, i) => BigInt(i + 1));
    const payload = enc.encode([1.5, [["BlockStored", hashes.map(Number), null, Array.from({ length: 160 }, (_, i) => i), 16, null]]]);
    const ev = decodeKvEventBatch(payload).events[0] as BlockStored;
    expect(ev.blockHashes).toEqual(hashes);
  });

  test("an events list of 8+ ints is 8 unknown events, and an int envelope is not a map", () => {
    const b = decodeKvEventBatch(enc.encode([1.5, [1, 2, 3, 4, 5, 6, 7, 8]]));
    expect(b.unknownEvents).toBe(8);
    expect(() => decodeKvEventBatch(enc.encode([1, 2, 3, 4, 5, 6, 7, 8]))).toThrow(/events is not an array/);
    const bad = decodeKvEventBatch(enc.encode([1.5, [{ type: "BlockStored", block_hashes: [1], parent_block_hash: null, token_ids: [1, 2], block_size: 2, metadata: [1, 2, 3, 4, 5, 6, 7, 8] }]]));
    expect(bad.events.length).toBe(1); // metadata that is a list is no map: no salt, event kept
    expect((bad.events[0] as BlockStored).cacheSalt).toBeNull();
  });
});
