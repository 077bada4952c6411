// R13/R17 (docs/references.md#reliability-R13, #reliability-R17) for the msgpack event decoder: thousands of seeded mutations never crash it (only
// KvDecodeError escapes), extension types are rejected wherever they appear, and declared lengths
// never drive an allocation.
import { describe, expect, test } from "bun:test";
import { Decoder, Encoder } from "@msgpack/msgpack";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng, type Rng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { KvEventStream } from "../../src/kv/ingest.ts";
import { decodeKvEventBatch, KvDecodeError } from "../../src/protocol/kv-events.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";
import { MsgpackRejected, readMsgpack } from "../../src/protocol/msgpack-read.ts";

function corpus(): Uint8Array[] {
  const events = [
    blockStored({ blockHashes: [2n ** 63n + 5n, 7n], parentBlockHash: 3n, tokenIds: Array.from({ length: 32 }, (_, i) => i * 1000), blockSize: 16, loraName: "a" }),
    blockStored({ blockHashes: [9n], parentBlockHash: null, tokenIds: [1, 2, 3, 4], blockSize: 4, groupIdx: 1, kvCacheSpecKind: "sliding_window", slidingWindow: 64 }),
    blockRemoved([7n], "CPU_PINNED"),
    { type: "AllBlocksCleared" as const },
  ];
  const extra = new Encoder({ useBigInt64: true }).encode([1.5, [{ type: "BlockStored", block_hashes: [new Uint8Array(32).fill(3)], parent_block_hash: null, token_ids: [1, 2], block_size: 2, medium: "GPU", extra_keys: [[{ type: "lora", name: "x" }]], metadata: { cache_salt: "s" } }], null]);
  return [encodeKvEventBatch({ ts: 1.7e9, events }, "array"), encodeKvEventBatch({ ts: 1.7e9, events }, "map"), extra];
}

function mutate(rng: Rng, src: Uint8Array, pool: Uint8Array[]): Uint8Array {
  let b = Uint8Array.from(src);
  const n = 1 + rng.int(4);
  for (let k = 0; k < n; k++) {
    switch (rng.int(7)) {
      case 0: // bit flip
        if (b.length) b[rng.int(b.length)]! ^= 1 << rng.int(8);
        break;
      case 1: // interesting byte (type headers, lengths)
        if (b.length) b[rng.int(b.length)] = [0xc7, 0xc9, 0xd4, 0xd8, 0xdd, 0xdf, 0xdb, 0xc6, 0xcf, 0xd3, 0xff, 0x00, 0xc1, 0x91, 0x81][rng.int(15)]!;
        break;
      case 2: // truncate
        b = b.subarray(0, rng.int(b.length + 1));
        break;
      case 3: { // insert random bytes
        const at = rng.int(b.length + 1);
        const ins = Uint8Array.from({ length: 1 + rng.int(8) }, () => rng.int(256));
        b = Uint8Array.from([...b.subarray(0, at), ...ins, ...b.subarray(at)]);
        break;
      }
      case 4: { // splice with another corpus entry
        const o = pool[rng.int(pool.length)]!;
        const at = rng.int(b.length + 1);
        b = Uint8Array.from([...b.subarray(0, at), ...o.subarray(rng.int(o.length + 1))]);
        break;
      }
      case 5: // 0xff run in a length field region
        if (b.length > 4) b.fill(0xff, rng.int(b.length - 4), undefined);
        break;
      default: // pure garbage
        b = Uint8Array.from({ length: rng.int(64) }, () => rng.int(256));
    }
  }
  return b;
}

/**
 * Deep equality, except that where the reader produced U+FFFD (invalid UTF-8, replaced as the
 * Encoding standard says) the library's own decoder may have produced something else.
 */
function sameValue(a: unknown, b: unknown): boolean {
  if (typeof a === "string") return a === b || (a.includes("\uFFFD") && typeof b === "string");
  if (a === null || typeof a !== "object") return Object.is(a, b);
  if (a instanceof Uint8Array) return b instanceof Uint8Array && Buffer.from(a).equals(Buffer.from(b));
  if (typeof b !== "object" || b === null || Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.some((k) => k.includes("\uFFFD"))) return true; // keys decoded differently: not comparable
  if (ka.length !== kb.length || ka.some((k, i) => k !== kb[i])) return false;
  return ka.every((k) => sameValue((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]));
}

function decodesOrRejects(b: Uint8Array): "ok" | "rejected" {
  try {
    decodeKvEventBatch(b);
    return "ok";
  } catch (e) {
    if (e instanceof KvDecodeError) return "rejected";
    throw new Error(`decoder threw ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)} on ${Buffer.from(b).toString("hex")}`);
  }
}

describe("msgpack event decoder fuzz", () => {
  test("10,000 seeded mutations: only KvDecodeError escapes", () => {
    const rng = new SeededRng(20261130);
    const pool = corpus();
    const seen = { ok: 0, rejected: 0 };
    for (let i = 0; i < 10_000; i++) seen[decodesOrRejects(mutate(rng, pool[rng.int(pool.length)]!, pool))]++;
    expect(seen.ok).toBeGreaterThan(100); // the mutations are not all trivially fatal
    expect(seen.rejected).toBeGreaterThan(1000);
  });

  test("extension types are rejected at every position and size", () => {
    const heads: number[][] = [[0xd4, 5, 0], [0xd5, 5, 0, 0], [0xd6, 5, 0, 0, 0, 0], [0xd7, 0xff, ...Array(8).fill(0)], [0xd8, 1, ...Array(16).fill(0)], [0xc7, 1, 5, 0], [0xc8, 0, 1, 5, 0], [0xc9, 0, 0, 0, 1, 5, 0]];
    for (const ext of heads) {
      const inEvent = Uint8Array.from([0x93, 0xcb, 0x41, 0xd9, 0, 0, 0, 0, 0, 0, 0x91, 0x93, 0xac, ...new TextEncoder().encode("BlockRemoved"), 0x91, ...ext, 0xa3, 0x47, 0x50, 0x55, 0x00]);
      expect(() => decodeKvEventBatch(inEvent)).toThrow(/extension/);
      expect(() => decodeKvEventBatch(Uint8Array.from(ext))).toThrow(/extension/);
    }
  });

  test("a 4 GiB declared length is rejected without allocating", () => {
    const cases = [
      [0xdd, 0xff, 0xff, 0xff, 0xff, 0x01], // array32
      [0xdf, 0xff, 0xff, 0xff, 0xff, 0x01, 0x01], // map32
      [0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdb, 0xff, 0xff, 0xff, 0xff, 0x41], // str32 inside
      [0x92, 0xc6, 0xff, 0xff, 0xff, 0xfe, 0x00], // bin32
      [0x92, 0xdc, 0xff, 0xff, 0x90], // array16 claiming 65535 elements in 1 byte
    ];
    for (const c of cases) {
      const before = process.memoryUsage().rss;
      expect(() => decodeKvEventBatch(Uint8Array.from(c))).toThrow(/truncated/);
      expect(process.memoryUsage().rss - before).toBeLessThan(64 * 1024 * 1024);
    }
  });

  test("nesting beyond the depth limit is rejected, not recursed into", () => {
    const deep = new Uint8Array(200_000).fill(0x91);
    expect(() => decodeKvEventBatch(deep)).toThrow(/deeper/);
    expect(() => readMsgpack(Uint8Array.from([...Array(40).fill(0x91), 0xc0]))).toThrow(MsgpackRejected);
    expect(readMsgpack(Uint8Array.from([...Array(3).fill(0x91), 0xc0]))).toEqual([[[null]]]);
    expect(() => readMsgpack(Uint8Array.from([...Array(32).fill(0x91), 0xc0]))).not.toThrow();
    expect(() => readMsgpack(Uint8Array.from([...Array(33).fill(0x91), 0xc0]))).toThrow(/deeper/);
  });

  test("the reader agrees with @msgpack/msgpack on everything an encoder writes", () => {
    const rng = new SeededRng(3);
    const enc = new Encoder({ useBigInt64: true });
    const lib = new Decoder({ useBigInt64: true });
    const value = (d: number): unknown => {
      const r = rng.int(d > 4 ? 7 : 9);
      if (r === 0) return rng.int(2 ** 31) - 2 ** 30;
      if (r === 1) return rng.float() * 1e12;
      if (r === 2) return "x".repeat(rng.int(300)) + (rng.int(2) ? "é€𝄞" : "");
      if (r === 3) return BigInt(rng.int(2 ** 31)) * 2n ** 33n * (rng.int(2) ? 1n : -1n);
      if (r === 4) return Uint8Array.from({ length: rng.int(300) }, () => 1);
      if (r === 5) return rng.int(2) === 0 ? null : true;
      if (r === 6) return [0, 127, 128, 255, 256, 65535, 65536, 2 ** 32 - 1, -1, -32, -33, -128, -129, -32768, -32769, -(2 ** 31)][rng.int(16)];
      if (r === 7) return Array.from({ length: rng.int(20) }, () => value(d + 1));
      return Object.fromEntries(Array.from({ length: rng.int(20) }, (_, i) => [`k${i}`, value(d + 1)]));
    };
    for (let i = 0; i < 150; i++) {
      const bytes = enc.encode(value(0));
      expect(sameValue(readMsgpack(bytes), lib.decode(bytes))).toBe(true);
    }
    // 32-bit length forms once each.
    for (const v of [new Array(70_000).fill(1), new Uint8Array(70_000), "y".repeat(70_000), Object.fromEntries(Array.from({ length: 70_000 }, (_, i) => [`k${i}`, 0]))]) {
      const bytes = enc.encode(v);
      expect(sameValue(readMsgpack(bytes), lib.decode(bytes))).toBe(true);
    }
  }, 30_000);

  test("on mutated inputs the reader accepts only what @msgpack/msgpack accepts, with the same value", () => {
    const rng = new SeededRng(99);
    const lib = new Decoder({ useBigInt64: true });
    const pool = corpus();
    let agreed = 0;
    for (let i = 0; i < 5000; i++) {
      const input = mutate(rng, pool[rng.int(pool.length)]!, pool);
      let mine: unknown;
      let mineErr: unknown = null;
      try {
        mine = readMsgpack(input);
      } catch (e) {
        mineErr = e;
      }
      if (mineErr !== null) {
        expect(mineErr).toBeInstanceOf(MsgpackRejected);
        continue; // (the library itself allocates by declared length: only ask it about accepted input)
      }
      let theirs: unknown;
      expect(() => (theirs = lib.decode(input))).not.toThrow();
      expect(sameValue(mine, theirs)).toBe(true);
      agreed++;
    }
    expect(agreed).toBeGreaterThan(100);
  });

  test("a stream fed random frames never throws and stays usable", () => {
    const rng = new SeededRng(77);
    const ix = new BlockIndex();
    const s = new KvEventStream("w", ix, { clock: new VirtualClock() });
    const pool = corpus();
    for (let i = 0; i < 3000; i++) {
      const nFrames = rng.int(5);
      const frames = Array.from({ length: nFrames }, (_, k) =>
        k === 1 && rng.float() < 0.7 ? seqFrame(BigInt(rng.int(50))) : mutate(rng, pool[rng.int(pool.length)]!, pool));
      s.message(frames);
    }
    const st = s.status();
    expect(st.malformedMessages + st.decodeErrors + st.batchesApplied + st.duplicates).toBeGreaterThan(0);
    s.message([new Uint8Array(0), seqFrame(1000n), pool[1]!]);
    expect(s.status().lastSeq).toBe("1000");
  });
});
