import { describe, expect, test } from "bun:test";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { NaiveIndex } from "../helpers/naive-index.ts";
import { MEDIA, type KvIndex, type Medium } from "../../src/kv/indexer.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { SeededRng, type Rng } from "../../src/core/rng.ts";
import { U64Table } from "../../src/kv/u64-table.ts";

function sorted(m: Map<string, unknown>) {
  return [...m.entries()].sort(([a], [b]) => (a < b ? -1 : 1));
}

/** Prompts drawn from a few shared system prompts plus random suffixes, as chained hashes. */
function promptPool(rng: Rng, n: number): bigint[][] {
  const bases = Array.from({ length: 4 }, () => Array.from({ length: 64 }, () => rng.int(50_000)));
  return Array.from({ length: n }, () => {
    const base = bases[rng.int(bases.length)]!.slice(0, 16 * rng.int(5));
    const tail = Array.from({ length: 16 * (1 + rng.int(8)) }, () => rng.int(50_000));
    return blockHashes([...base, ...tail], 16);
  });
}

function runDifferential(seed: number, workers: number, ops: number) {
  const rng = new SeededRng(seed);
  const fast = new BlockIndex(16);
  const naive = new NaiveIndex();
  const both = [fast, naive] as KvIndex[];
  const pool = promptPool(rng, 60);
  const ws = Array.from({ length: workers }, (_, i) => `w${i}`);
  for (let op = 0; op < ops; op++) {
    const w = ws[rng.int(ws.length)]!;
    const medium: Medium = MEDIA[rng.int(3)]!;
    const p = pool[rng.int(pool.length)]!;
    const r = rng.float();
    if (r < 0.55) {
      const upto = 1 + rng.int(p.length);
      const noops = both.map((ix) => {
        const u: number[] = [];
        ix.apply(w, { kind: "stored", medium, hashes: p.slice(0, upto) }, (i) => u.push(i));
        return u;
      });
      expect(noops[0]).toEqual(noops[1]!);
    } else if (r < 0.9) {
      const from = rng.int(p.length);
      const hashes = p.slice(from, from + 1 + rng.int(3));
      const noops = both.map((ix) => {
        const u: number[] = [];
        ix.apply(w, { kind: "removed", medium, hashes }, (i) => u.push(i));
        return u;
      });
      expect(noops[0]).toEqual(noops[1]!);
    } else if (r < 0.94) {
      for (const ix of both) ix.clearWorker(w);
    } else if (r < 0.97) {
      for (const ix of both) ix.removeWorker(w);
    } else {
      for (const ix of both) ix.apply(w, { kind: "cleared" });
    }
    if (op % 7 === 0) {
      const q = pool[rng.int(pool.length)]!;
      expect(sorted(fast.findMatches(q))).toEqual(sorted(naive.findMatches(q)));
    }
  }
  for (const q of pool) expect(sorted(fast.findMatches(q))).toEqual(sorted(naive.findMatches(q)));
  expect(fast.size()).toBe(naive.size());
  expect(fast.stats().entries).toBe(naive.stats().entries);
  for (const w of ws) for (const m of MEDIA) for (const h of pool[0]!) expect(fast.holds(w, h, m)).toBe(naive.holds(w, h, m));
}

describe("BlockIndex vs NaiveIndex (differential)", () => {
  test("16 workers, random stores/removals/clears", () => {
    for (const seed of [1, 2, 3]) runDifferential(seed, 16, 3000);
  });
  test("70 workers: bitsets widen past 32 and 64 workers", () => {
    runDifferential(42, 70, 4000);
  });
});

describe("BlockIndex", () => {
  const h = blockHashes(Array.from({ length: 16 * 6 }, (_, i) => i), 16);

  test("counts leading blocks in tiers: the GPU run, then its CPU continuation, then disk", () => {
    const ix = new BlockIndex();
    ix.apply("a", { kind: "stored", medium: "gpu", hashes: h.slice(0, 4) });
    ix.apply("a", { kind: "stored", medium: "cpu", hashes: h.slice(0, 6) });
    ix.apply("b", { kind: "stored", medium: "gpu", hashes: h.slice(0, 2) });
    ix.apply("c", { kind: "stored", medium: "gpu", hashes: h.slice(1, 6) }); // no first block: no match
    // d: GPU holds the start, the CPU tier (evicted blocks) the continuation, disk one more block.
    ix.apply("d", { kind: "stored", medium: "gpu", hashes: h.slice(0, 2) });
    ix.apply("d", { kind: "stored", medium: "cpu", hashes: h.slice(2, 4) });
    ix.apply("d", { kind: "stored", medium: "disk", hashes: h.slice(4, 5) });
    // e: block 0 only on CPU, blocks 1-2 on GPU: no GPU run, a CPU-tier run of 3.
    ix.apply("e", { kind: "stored", medium: "cpu", hashes: h.slice(0, 1) });
    ix.apply("e", { kind: "stored", medium: "gpu", hashes: h.slice(1, 3) });
    const m = ix.findMatches(h);
    expect(m.get("d")).toEqual({ gpu: 2, cpu: 2, disk: 1 });
    expect(m.get("e")).toEqual({ gpu: 0, cpu: 3, disk: 0 });
    expect(m.get("a")).toEqual({ gpu: 4, cpu: 2, disk: 0 });
    expect(m.get("b")).toEqual({ gpu: 2, cpu: 0, disk: 0 });
    expect(m.has("c")).toBe(false);
    expect(ix.findMatches([])).toEqual(new Map());
  });

  test("a hole stops the run; removal is not cascaded", () => {
    const ix = new BlockIndex();
    ix.apply("a", { kind: "stored", medium: "gpu", hashes: h });
    ix.apply("a", { kind: "removed", medium: "gpu", hashes: [h[2]!] });
    expect(ix.findMatches(h).get("a")).toEqual({ gpu: 2, cpu: 0, disk: 0 });
    expect(ix.holds("a", h[3]!, "gpu")).toBe(true);
  });

  test("the hash 0 (stored under the table's stand-in key) matches at every position, in both walks", () => {
    // block-match.ts computes homes outside U64Table, so it must map the key (0, 0) as find() does.
    const hs = [5n, 0n, 7n, 0n, 9n, ...Array.from({ length: 150 }, (_, i) => 1000n + BigInt(i)), 0n];
    for (const workers of [2, 40]) {
      const ix = new BlockIndex(16);
      for (let w = 0; w < workers; w++) ix.apply(`w${w}`, { kind: "stored", medium: w % 2 ? "cpu" : "gpu", hashes: hs.slice(0, w === 1 ? 3 : hs.length) });
      const m = ix.findMatches(hs);
      expect(m.get("w0")).toEqual({ gpu: hs.length, cpu: 0, disk: 0 });
      expect(m.get("w1")).toEqual({ gpu: 0, cpu: 4, disk: 0 }); // holds 5, 0, 7: position 3 is 0 again
      ix.apply("w0", { kind: "removed", medium: "gpu", hashes: [0n] });
      expect(ix.findMatches(hs).get("w0")).toEqual({ gpu: 1, cpu: 0, disk: 0 });
    }
  });

  test("removeWorker takes effect at once and frees the bit for a new worker", () => {
    const ix = new BlockIndex();
    ix.apply("a", { kind: "stored", medium: "gpu", hashes: h });
    ix.removeWorker("a");
    expect(ix.findMatches(h).size).toBe(0);
    expect(ix.size()).toBe(0);
    ix.apply("z", { kind: "stored", medium: "disk", hashes: h.slice(0, 1) });
    expect(ix.findMatches(h).get("z")).toEqual({ gpu: 0, cpu: 0, disk: 1 });
    expect(ix.stats().workers).toBe(1);
  });

  test("clearing a worker in a large table leaves every other entry intact", () => {
    const rng = new SeededRng(5);
    const ix = new BlockIndex(16);
    const naive = new NaiveIndex();
    const hashes = Array.from({ length: 20_000 }, () => BigInt(rng.int(2 ** 30)) * 4_294_967_296n + BigInt(rng.int(2 ** 30)));
    for (let i = 0; i < hashes.length; i++) {
      for (const x of [ix, naive] as KvIndex[]) x.apply(i % 3 === 0 ? "a" : "b", { kind: "stored", medium: "gpu", hashes: [hashes[i]!] });
    }
    ix.clearWorker("a");
    naive.clearWorker("a");
    expect(ix.size()).toBe(naive.size());
    for (let i = 0; i < hashes.length; i += 1) expect(ix.holds("b", hashes[i]!, "gpu")).toBe(i % 3 !== 0);
  });
});

describe("U64Table", () => {
  test("backward-shift deletion keeps every key findable under churn", () => {
    const rng = new SeededRng(9);
    const t = new U64Table(1, 16);
    const live = new Map<string, [number, number]>();
    for (let i = 0; i < 50_000; i++) {
      // Few distinct low bits force long probe runs and wrap-around.
      const lo = rng.int(64) * 1024;
      const hi = rng.int(400);
      const k = `${lo}:${hi}`;
      if (rng.float() < 0.6) {
        const slot = t.insert(lo, hi); // may grow the table: read t.data after it
        t.data[t.at(slot)] = hi + 1;
        live.set(k, [lo, hi]);
      } else {
        const s = t.find(lo, hi);
        expect(s >= 0).toBe(live.has(k));
        if (s >= 0) t.removeAt(s);
        live.delete(k);
      }
    }
    expect(t.count).toBe(live.size);
    for (const [lo, hi] of live.values()) {
      const s = t.find(lo, hi);
      expect(s).toBeGreaterThanOrEqual(0);
      expect(t.data[t.at(s)]).toBe(hi + 1);
    }
  });
});
