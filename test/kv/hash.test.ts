import { describe, expect, test } from "bun:test";
import { blockHashes, chainHashes, localBlockHash, loraSeed, nextSequenceHash, XXH3_SEED } from "../../src/kv/hash.ts";
import { xxh3_64 } from "../../src/kv/xxh3.ts";
import { SeededRng } from "../../src/core/rng.ts";

const data = (len: number) => Uint8Array.from({ length: len }, (_, i) => (i * 131 + 7) & 255);

// Computed with python3-xxhash 3.2.0 (libxxhash 0.8.3), xxhash.xxh3_64_intdigest(data(len), seed=s);
// test/fixtures/kv/gen_vectors.py recomputes them when python3-xxhash is installed.
const XXH3_VECTORS: [number, bigint, bigint][] = [
  [0, 0n, 3244421341483603138n],
  [0, 1337n, 15128690059815094969n],
  [0, 9223372036854788153n, 8105839778992905808n],
  [3, 0n, 7943829059066201772n],
  [3, 9223372036854788153n, 15847147527388650462n],
  [8, 1337n, 4028626677524568534n],
  [8, 9223372036854788153n, 18196068421431332236n],
  [16, 9223372036854788153n, 2501090916578516319n],
  [64, 1337n, 14406255918677121947n],
  [64, 9223372036854788153n, 773631044205390524n],
  [200, 9223372036854788153n, 13938809006411932320n],
  [241, 1337n, 14054063772819837973n],
  [241, 9223372036854788153n, 15251827652765720403n],
  [1500, 0n, 11511861959708728254n],
  [1500, 9223372036854788153n, 13467985521260085374n],
];

describe("XXH3-64", () => {
  test("TS implementation matches libxxhash vectors in every length class", () => {
    for (const [len, seed, want] of XXH3_VECTORS) expect(xxh3_64(data(len), seed)).toBe(want);
  });

  test("Bun.hash.xxHash3 matches libxxhash for 32-bit seeds", () => {
    for (const [len, seed, want] of XXH3_VECTORS) if (seed < 2n ** 32n) expect(Bun.hash.xxHash3(data(len), seed)).toBe(want);
  });

  test("TS implementation agrees with Bun's native XXH3 on random inputs and 32-bit seeds", () => {
    const rng = new SeededRng(7);
    for (let i = 0; i < 300; i++) {
      const len = rng.int(3000);
      const d = Uint8Array.from({ length: len }, () => rng.int(256));
      const seed = BigInt(rng.int(2 ** 32));
      expect(xxh3_64(d, seed)).toBe(Bun.hash.xxHash3(d, seed));
    }
  });
});

// Dynamo's formula computed in Python (python3-xxhash): local = xxh3(u32le tokens, 1337 [+ xxh3(lora)]),
// seq_0 = local_0, seq_i = xxh3(u64le(seq_{i-1}) ‖ u64le(local_i), 1337).
describe("block hashes", () => {
  const toks = Array.from({ length: 32 }, (_, i) => 1000 + i);

  test("match Dynamo's chained XXH3 (seed 1337)", () => {
    expect(blockHashes(toks, 16)).toEqual([17863182269597592868n, 4422518191793896761n]);
    expect(blockHashes(Array.from({ length: 200 }, (_, i) => 5 + i), 64)).toEqual([
      1242027480237226221n, 8762749413389679599n, 9904557960420196697n,
    ]);
  });

  test("fold the LoRA name into the seed; an empty name is the base model", () => {
    expect(blockHashes(toks, 16, "sql-adapter")).toEqual([13256498990711557506n, 11469899355629045321n]);
    expect(blockHashes(toks, 16, "")).toEqual(blockHashes(toks, 16));
    expect(loraSeed(null)).toBe(XXH3_SEED);
  });

  test("hash full blocks only", () => {
    expect(blockHashes(toks.slice(0, 31), 16)).toHaveLength(1);
    expect(blockHashes(toks.slice(0, 15), 16)).toEqual([]);
    expect(() => blockHashes(toks, 0)).toThrow(RangeError);
  });

  test("are prefix hashes: equal prefixes give equal leading hashes, a change propagates", () => {
    const a = Array.from({ length: 160 }, (_, i) => i * 7);
    const b = [...a];
    b[40] = 99999;
    const ha = blockHashes(a, 16);
    const hb = blockHashes(b, 16);
    expect(hb.slice(0, 2)).toEqual(ha.slice(0, 2));
    for (let i = 2; i < ha.length; i++) expect(hb[i]).not.toBe(ha[i]);
  });

  test("chainHashes continues from a parent like one long prompt", () => {
    const t = Array.from({ length: 64 }, (_, i) => i + 3);
    const all = blockHashes(t, 16);
    expect(chainHashes(t.slice(16), 16, all[0]!)).toEqual(all.slice(1));
    expect(nextSequenceHash(all[0]!, localBlockHash(t, 16, 16))).toBe(all[1]!);
  });
});
