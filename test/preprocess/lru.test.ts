// ByteLru: recency order, the byte bound, and O(1) operations at a full memo. The old version
// evicted by iterating the Map from its start, which in JSC walks every hole left by earlier
// deletions: a full 100k-entry memo cost ~18 µs per set (a 200,000-message chat spent tens of
// seconds there). The timing bound below is a wide safety bound, not a benchmark.
import { expect, test } from "bun:test";
import { ByteLru } from "../../src/preprocess/lru.ts";

test("least recently used goes first; the byte budget holds; oversize values are not kept", () => {
  const l = new ByteLru<string, number>(30);
  l.set("a", 1, 10);
  l.set("b", 2, 10);
  l.set("c", 3, 10);
  expect(l.get("a")).toBe(1); // a is now the most recent
  l.set("d", 4, 10); // evicts b
  expect(l.get("b")).toBeUndefined();
  expect([l.get("a"), l.get("c"), l.get("d")]).toEqual([1, 3, 4]);
  expect(l.bytes).toBe(30);
  l.set("c", 33, 20); // replace: evicts the least recent (a), keeps d and c
  expect(l.get("a")).toBeUndefined();
  expect([l.get("c"), l.get("d"), l.size, l.bytes]).toEqual([33, 4, 2, 30]);
  l.set("huge", 0, 31);
  expect(l.get("huge")).toBeUndefined();
  expect(l.size).toBe(2);
  expect(l.hits).toBeGreaterThan(0);
  expect(l.misses).toBe(3);
});

test("set and get stay O(1) at a full memo of 200k entries (safety bound)", () => {
  const cap = 200_000;
  const l = new ByteLru<number, number>(cap * 100);
  const t0 = performance.now();
  for (let i = 0; i < 3 * cap; i++) {
    l.set(i, i, 100);
    if (i % 3 === 0) l.get(i - 1000);
  }
  const ms = performance.now() - t0;
  expect(l.size).toBe(cap);
  expect(l.bytes).toBe(cap * 100);
  // ~0.3 s on a loaded 2-core box after the fix; the old eviction took minutes here.
  expect(ms).toBeLessThan(8_000);
});
