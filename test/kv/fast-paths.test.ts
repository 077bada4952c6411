// The ingest fast paths (u32-pair hashes, packed token lists, BlockIndex.applyPairs, U64Table
// rebuild) must give exactly what the BigInt / plain-array paths give.
import { describe, expect, test } from "bun:test";
import { SeededRng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { blockHashes, chainHashes, chainHashesU32, localBlockHash, loraSeed, nextSequenceHash } from "../../src/kv/hash.ts";
import { MEDIA, type Medium } from "../../src/kv/indexer.ts";
import { NaiveIndex } from "../helpers/naive-index.ts";
import { U64Table, join64 } from "../../src/kv/u64-table.ts";
import { WorkerBlockMap } from "../../src/kv/worker-blocks.ts";
import type { KvEvent } from "../../src/protocol/kv-events.ts";
import { blockRemoved, blockStored } from "../../src/protocol/kv-encode.ts";

const pairsToBig = (p: Uint32Array, n: number) => Array.from({ length: n }, (_, i) => join64(p[2 * i]!, p[2 * i + 1]!));

describe("chainHashesU32", () => {
  test("equals chainHashes and the per-block formula: with and without parent, LoRA (64-bit seed), typed tokens, maxBlocks", () => {
    const rng = new SeededRng(5);
    for (const bs of [1, 4, 16, 17]) {
      const toks = Array.from({ length: bs * 9 + 3 }, () => rng.int(2 ** 32));
      for (const lora of [null, "sql-adapter"]) {
        for (const parent of [null, 0n, 2n ** 64n - 1n, 123456789012345678n]) {
          const want = chainHashes(toks, bs, parent, lora);
          let prev = parent;
          const seed = loraSeed(lora);
          expect(seed < 2n ** 32n).toBe(lora === null); // the adapter takes the BigInt XXH3 path
          for (let i = 0; i < want.length; i++) {
            const local = localBlockHash(toks, i * bs, bs, seed);
            prev = prev === null ? local : nextSequenceHash(prev, local);
            expect(want[i]).toBe(prev);
          }
          const out = new Uint32Array(2 * want.length);
          const plo = parent === null ? 0 : Number(parent & 0xffffffffn);
          const phi = parent === null ? 0 : Number(parent >> 32n);
          for (const t of [toks, Uint32Array.from(toks)]) {
            expect(chainHashesU32(t, bs, parent !== null, plo, phi, lora, Infinity, out)).toBe(want.length);
            expect(pairsToBig(out, want.length)).toEqual(want);
            expect(chainHashesU32(t, bs, parent !== null, plo, phi, lora, 2, out)).toBe(Math.min(2, want.length));
          }
        }
      }
    }
    expect(() => chainHashesU32([1, 2, 3, 4], 2, false, 0, 0, null, 9, new Uint32Array(2))).toThrow(RangeError);
    expect(() => chainHashesU32([1, 2], 0, false, 0, 0, null, 9, new Uint32Array(8))).toThrow(RangeError);
  });
});

describe("BlockIndex.applyPairs", () => {
  test("is apply() on u32 halves, including the unchanged callback", () => {
    const rng = new SeededRng(8);
    const a = new BlockIndex(16);
    const b = new BlockIndex(16);
    const prompts = Array.from({ length: 30 }, () => blockHashes(Array.from({ length: 16 * (1 + rng.int(12)) }, () => rng.int(1000)), 16));
    for (let op = 0; op < 2000; op++) {
      const w = `w${rng.int(5)}`;
      const medium: Medium = MEDIA[rng.int(3)]!;
      const p = prompts[rng.int(prompts.length)]!;
      const hashes = p.slice(rng.int(p.length));
      const kind = rng.float() < 0.6 ? "stored" : "removed";
      const pairs = new Uint32Array(2 * hashes.length + 6); // longer than n: only n are read
      hashes.forEach((h, i) => {
        pairs[2 * i] = Number(h & 0xffffffffn);
        pairs[2 * i + 1] = Number(h >> 32n);
      });
      const ua: number[] = [];
      const ub: number[] = [];
      a.apply(w, { kind, medium, hashes }, (i) => ua.push(i));
      b.applyPairs(w, kind, medium, pairs, hashes.length, (i) => ub.push(i));
      expect(ub).toEqual(ua);
    }
    const entries = (ix: BlockIndex) => {
      const s: string[] = [];
      ix.forEachEntry((w, h, m) => s.push(`${w}/${h}/${m}`));
      return s.sort();
    };
    expect(entries(b)).toEqual(entries(a));
    for (const p of prompts) expect([...b.findMatches(p)].sort()).toEqual([...a.findMatches(p)].sort());
  });
});

describe("WorkerBlockMap over BlockIndex (pairs) and NaiveIndex (bigint) agree", () => {
  test("random stores (plain and typed token lists), removals, id reuse and clears", () => {
    const rng = new SeededRng(11);
    const BS = 4;
    const fast = new BlockIndex(16);
    const naive = new NaiveIndex();
    const mf = new WorkerBlockMap("w", fast);
    const mn = new WorkerBlockMap("w", naive);
    const tokens = Array.from({ length: 4 * 64 }, () => rng.int(300));
    for (let op = 0; op < 3000; op++) {
      const r = rng.float();
      let ev: KvEvent;
      if (r < 0.55) {
        const from = rng.int(60);
        const n = 1 + rng.int(4);
        const toks = tokens.slice(from * BS, (from + n) * BS - (rng.float() < 0.1 ? 1 : 0));
        ev = blockStored({
          // Engine ids drawn from a small range so ids get reused for other content.
          blockHashes: Array.from({ length: n }, () => BigInt(rng.int(200))),
          parentBlockHash: rng.float() < 0.3 ? null : BigInt(rng.int(200)),
          tokenIds: rng.float() < 0.5 ? toks : Uint32Array.from(toks),
          blockSize: BS,
          medium: ["GPU", "CPU", "DISK"][rng.int(3)]!,
          loraName: rng.float() < 0.1 ? "x" : null,
        });
      } else if (r < 0.98) {
        ev = blockRemoved(Array.from({ length: 1 + rng.int(3) }, () => BigInt(rng.int(200))), ["GPU", "CPU", "DISK"][rng.int(3)]!);
      } else {
        ev = { type: "AllBlocksCleared" };
      }
      mf.apply(ev);
      mn.apply(ev);
      expect(mf.counters).toEqual(mn.counters);
    }
    const fastSet = new Set<string>();
    fast.forEachEntry((w, h, m) => fastSet.add(`${w}|${h}|${m}`));
    expect(fastSet).toEqual(naive.snapshot());
    expect(mf.counters.blocksStored).toBeGreaterThan(100);
  });
});

describe("U64Table rebuild", () => {
  test("growth, clear and shrink keep exactly the live keys and their values", () => {
    const rng = new SeededRng(3);
    const t = new U64Table(2, 16);
    const live = new Map<string, [number, number, number]>();
    for (let i = 0; i < 20_000; i++) {
      const lo = rng.int(2 ** 32);
      const hi = rng.float() < 0.01 ? 0 : rng.int(2 ** 32);
      const s = t.insert(lo, hi);
      t.data[t.at(s)] = i;
      t.data[t.at(s) + 1] = lo ^ 0x5555;
      live.set(`${lo}:${hi}`, [lo, hi, i]);
      if (i === 10_000) {
        t.clear();
        live.clear();
      }
    }
    t.insert(0, 0); // the one key stored under the empty marker's stand-in
    live.set("0:0", [0, 0, -1]);
    t.data[t.at(t.find(0, 0))] = -1 >>> 0;
    t.data[t.at(t.find(0, 0)) + 1] = 0x5555;
    expect(t.count).toBe(live.size);
    for (const [lo, hi, i] of live.values()) {
      const s = t.find(lo, hi);
      expect(s).toBeGreaterThanOrEqual(0);
      expect(t.data[t.at(s)]).toBe(i >>> 0);
      expect(t.data[t.at(s) + 1]).toBe((lo ^ 0x5555) >>> 0);
    }
    let n = 0;
    for (const [lo, hi] of live.values()) {
      if (n++ % 10 !== 0) t.removeAt(t.find(lo, hi)), live.delete(`${lo}:${hi}`);
    }
    const cap = t.cap;
    t.maybeShrink();
    expect(t.cap).toBeLessThan(cap);
    expect(t.count).toBe(live.size);
    for (const [lo, hi] of live.values()) expect(t.find(lo, hi)).toBeGreaterThanOrEqual(0);
  });
});

describe("findMatchesPairs and reserve", () => {
  test("findMatchesPairs equals findMatches; reserve keeps entries and answers", () => {
    const rng = new SeededRng(21);
    const ix = new BlockIndex(16);
    const doc = Array.from({ length: 16 * 300 }, () => rng.int(5000));
    const hs = blockHashes(doc, 16);
    for (let w = 0; w < 40; w++) {
      const upto = rng.int(hs.length + 1);
      ix.apply(`w${w}`, { kind: "stored", medium: MEDIA[w % 3]!, hashes: hs.slice(0, upto) });
      if (upto > 10) ix.apply(`w${w}`, { kind: "removed", medium: MEDIA[w % 3]!, hashes: [hs[rng.int(upto)]!] });
    }
    const pairs = new Uint32Array(2 * hs.length);
    const n = chainHashesU32(doc, 16, false, 0, 0, null, Infinity, pairs);
    const want = [...ix.findMatches(hs)].sort();
    expect(want.length).toBeGreaterThan(10);
    expect([...ix.findMatchesPairs(pairs, n)].sort()).toEqual(want);
    expect(ix.findMatchesPairs(pairs, 0).size).toBe(0);
    ix.reserve(100_000);
    expect([...ix.findMatches(hs)].sort()).toEqual(want);
    const m = new WorkerBlockMap("w", ix);
    m.reserve(50_000);
    m.apply(blockStored({ blockHashes: [1n, 2n], parentBlockHash: null, tokenIds: doc.slice(0, 32), blockSize: 16 }));
    expect(ix.findMatches(hs).get("w")?.gpu).toBe(2);
  });
});
