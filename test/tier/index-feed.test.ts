// The tier feeds the router's block index: cpu/disk residency follows stores, demotions,
// promotions and deletions, for every worker of the host.
import { shmCharge } from "../../src/tier/shm-medium.ts";
import { afterAll, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import type { KvIndex } from "../../src/kv/indexer.ts";
import { indexEventsFor, type TierChange } from "../../src/tier/index-feed.ts";

/** An `onChange` hook that keeps `index` in step with the tier for these workers (as tier-key.ts tierIndexFeed does per model). */
const feedIndex = (index: KvIndex, workers: () => readonly string[], hashOfKey: (key: string) => bigint | undefined) => (c: TierChange) => {
  for (const [w, ev] of indexEventsFor(c, hashOfKey, workers())) index.apply(w, ev);
};
import { cleanupDirs, openTier, valueOf } from "./helpers.ts";

afterAll(cleanupDirs);
const KiB = 1024;
const hashOfKey = (k: string) => (k.startsWith("blk:") ? BigInt(k.slice(4)) : undefined);

test("indexEventsFor maps a change to one event per worker; unknown keys map to none", () => {
  expect(indexEventsFor({ kind: "stored", tier: "ssd", key: "blk:7" }, hashOfKey, ["w1", "w2"])).toEqual([
    ["w1", { kind: "stored", medium: "disk", hashes: [7n] }],
    ["w2", { kind: "stored", medium: "disk", hashes: [7n] }],
  ]);
  expect(indexEventsFor({ kind: "stored", tier: "cpu", key: "lmcache-key" }, hashOfKey, ["w1"])).toEqual([]);
});

test("store → cpu, demotion → disk, promotion → cpu, deletion → nothing; findMatches credits the tier", () => {
  const index = new BlockIndex();
  const clock = new VirtualClock(0);
  const { tier } = openTier({ cpuBytes: 2 * shmCharge(64 * KiB), ssdBytes: 2 * 64 * KiB }, { clock, onChange: feedIndex(index, () => ["w1", "w2"], hashOfKey) });
  for (const h of [1, 2, 3]) {
    clock.advance(1);
    tier.put(`blk:${h}`, valueOf("b", h, 64 * KiB));
  }
  expect(index.holds("w1", 1n, "disk")).toBe(true); // demoted
  expect(index.holds("w1", 1n, "cpu")).toBe(false);
  expect(index.holds("w2", 3n, "cpu")).toBe(true);
  expect(index.findMatches([2n, 3n]).get("w1")).toEqual({ gpu: 0, cpu: 2, disk: 0 });
  clock.advance(1);
  tier.get("blk:1"); // promoted (and blk:2 demoted to make room)
  expect(index.holds("w1", 1n, "cpu")).toBe(true);
  expect(index.holds("w1", 1n, "disk")).toBe(false);
  expect(index.holds("w1", 2n, "disk")).toBe(true);
  tier.delete("blk:1");
  expect(index.holds("w1", 1n, "cpu")).toBe(false);
  expect(index.holds("w1", 1n, "disk")).toBe(false);
});
