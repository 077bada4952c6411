// The sim engine's tier key format and its router side: keys map back to herd's block hashes, other
// keys (LMCache's) are ignored, and a key credits only the workers of its model.
import { expect, test } from "bun:test";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { parseTierKey, tierKey } from "../../src/protocol/tier-key.ts";
import { hashOfKey, tierIndexFeed, tierIndexReplay } from "../../src/tier/tier-key.ts";

test("tierKey ↔ hashOfKey round-trips every u64, including models with colons", () => {
  for (const h of [0n, 1n, 0xdeadbeefn, (1n << 64n) - 1n, ...blockHashes(Array.from({ length: 64 }, (_, i) => i), 16)]) {
    const k = tierKey("org/model:v2", h);
    expect(k).toMatch(/^herd:org\/model:v2:[0-9a-f]{16}$/);
    expect(hashOfKey(k)).toBe(h);
    expect(parseTierKey(k)!.model).toBe("org/model:v2");
  }
  expect(tierKey("m", 255n)).toBe("herd:m:00000000000000ff");
});

test("keys of other formats are not indexed", () => {
  for (const k of ["vllm@m@1@0@abc@bfloat16", "m@1@0@deadbeef@half", "herd:m:123", "herd::00000000000000ff", "herd:m:00000000000000FF", "x:m:00000000000000ff", ""]) {
    expect(hashOfKey(k)).toBeUndefined();
  }
});

test("tierIndexFeed: stored/removed per tier for the model's workers only; replay indexes the catalog", () => {
  const index = new BlockIndex();
  const workersOf = (m: string) => (m === "a" ? ["w1", "w2"] : m === "b" ? ["w3"] : []);
  const feed = tierIndexFeed(index, workersOf);
  feed({ kind: "stored", tier: "cpu", key: tierKey("a", 7n) });
  feed({ kind: "stored", tier: "ssd", key: tierKey("b", 8n) });
  feed({ kind: "stored", tier: "cpu", key: "lmcache@key@1@2" });
  expect(index.holds("w1", 7n, "cpu") && index.holds("w2", 7n, "cpu")).toBe(true);
  expect(index.holds("w3", 7n, "cpu")).toBe(false);
  expect(index.holds("w3", 8n, "disk")).toBe(true);
  feed({ kind: "removed", tier: "cpu", key: tierKey("a", 7n) });
  expect(index.holds("w1", 7n, "cpu")).toBe(false);
  const fresh = new BlockIndex();
  tierIndexReplay(fresh, [{ key: tierKey("a", 9n), tier: "cpu" }, { key: "other", tier: "cpu" }], workersOf);
  expect(fresh.holds("w2", 9n, "cpu")).toBe(true);
  expect(fresh.size()).toBe(1);
});
