import { describe, expect, test } from "bun:test";
import { ActiveBlocks } from "../../src/router/active.ts";
import { mapKey, trackedKeys, trackedPositions } from "../../src/router/sampling.ts";

/** The hashes at the tracked positions: the reference trackedKeys is checked against. */
const trackedHashes = (hashes: readonly bigint[]) => trackedPositions(hashes.length).map((p) => hashes[p]!);

/** A prompt of n blocks whose hashes are chained by `tag`: prompts with the same tag share a prefix. */
const prompt = (tag: number, n: number): bigint[] => Array.from({ length: n }, (_, i) => (BigInt(tag) << 40n) | BigInt(i + 1));

describe("trackedKeys", () => {
  test("equals trackedHashes().map(mapKey), is computed once per array, and follows in-place growth", () => {
    const p = prompt(1, 200);
    const k = trackedKeys(p);
    expect([...k]).toEqual(trackedHashes(p).map(mapKey));
    expect(trackedKeys(p)).toBe(k); // same array object: remembered
    p.push(...prompt(1, 300).slice(200));
    expect([...trackedKeys(p)]).toEqual(trackedHashes(p).map(mapKey));
    expect(trackedKeys([])).toEqual([]);
  });
});

describe("ActiveBlocks keeps released keys for reuse without changing any answer", () => {
  test("book/release cycles over shared and distinct prefixes", () => {
    const a = new ActiveBlocks();
    const doc = prompt(7, 2000);
    const withTail = (i: number) => [...doc, BigInt(i) * 7919n + 3n];
    for (let i = 0; i < 50; i++) {
      const p = withTail(i);
      const { tracked, covered } = a.track(p);
      a.add("w", tracked, p.length + 1 - covered);
      expect(a.blocks("w")).toBe(p.length + 1);
      expect(a.overlaps(withTail(i + 1000)).get("w")).toBe(2000); // the whole doc: its last block (position 1999) is tracked
      a.remove("w", tracked, p.length + 1 - covered);
      expect(a.blocks("w")).toBe(0);
      expect(a.overlaps(p).size).toBe(0);
    }
    // Two in flight sharing the doc: the prefix counts once, and stays active until both end.
    const p1 = withTail(1);
    const p2 = withTail(2);
    const t1 = a.track(p1);
    const t2 = a.track(p2);
    a.add("w", t1.tracked, 0);
    a.add("w", t2.tracked, 0);
    expect(a.blocks("w")).toBe(t1.covered);
    a.remove("w", t1.tracked, 0);
    expect(a.blocks("w")).toBe(t2.covered);
    expect(a.overlaps(p1).get("w")).toBe(t1.covered);
    a.remove("w", t2.tracked, 0);
    a.remove("w", t2.tracked, 0); // a second release of the same keys changes nothing
    expect(a.blocks("w")).toBe(0);
    expect(a.overlaps(p1).size).toBe(0);
  });

  test("many distinct prompts: released keys are swept and counts stay exact", () => {
    const a = new ActiveBlocks();
    const held = a.track(prompt(1, 64)); // one request stays in flight throughout
    a.add("w", held.tracked, 0);
    for (let tag = 2; tag < 200; tag++) {
      const t = a.track(prompt(tag, 64));
      a.add("w", t.tracked, 1);
      expect(a.blocks("w")).toBe(64 + 64 + 1);
      a.remove("w", t.tracked, 1);
      expect(a.blocks("w")).toBe(64);
    }
    expect(a.overlaps(prompt(1, 64)).get("w")).toBe(64);
    expect(a.overlaps(prompt(150, 64)).size).toBe(0);
    a.remove("w", held.tracked, 0);
    expect(a.blocks("w")).toBe(0);
    expect(a.overlaps(prompt(1, 64)).size).toBe(0);
  });
});
