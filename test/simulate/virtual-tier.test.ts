// herd simulate's model of the host's CPU KV tier: LRU at capacity, hits refresh, the load time on
// the virtual clock, contents reported for the index; and `herd simulate --kv-tier-blocks` end to
// end (virtual time, deterministic): doc-QA with a small GPU cache gains prefix hits and TTFT.
import { expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { VirtualClock } from "../../src/core/clock.ts";
import { simulateMain } from "../../src/simulate/cli.ts";
import { VirtualTier } from "../../src/simulate/virtual-tier.ts";

test("capacity is never exceeded; the least recently used block goes first; a hit refreshes", () => {
  const changes: string[] = [];
  const t = new VirtualTier({ capacityBlocks: 3, bytesPerBlock: 1, loadGbPerS: 0, timeScale: 1 }, new VirtualClock(0), (k, h) => changes.push(`${k}:${h}`));
  for (const h of [1n, 2n, 3n]) t.put(h);
  expect(t.size).toBe(3);
  expect(t.leading([1n, 2n], 0)).toBe(2); // 1 and 2 refreshed: 3 is now the coldest
  t.put(4n);
  expect(t.size).toBe(3);
  expect([t.has(1n), t.has(2n), t.has(3n), t.has(4n)]).toEqual([true, true, false, true]);
  t.put(4n); // already held: refreshed, no event
  expect(changes).toEqual(["stored:1", "stored:2", "stored:3", "removed:3", "stored:4"]);
  expect(t.leading([9n, 1n], 0)).toBe(0); // leading run only
  expect(t.leading([9n, 1n, 2n, 3n], 1)).toBe(2);
});

test("a lookup answers after blocks × bytes / rate of virtual time; a miss answers at once", () => {
  const clock = new VirtualClock(0);
  const t = new VirtualTier({ capacityBlocks: 100, bytesPerBlock: 2.25 * 2 ** 20, loadGbPerS: 25, timeScale: 1 }, clock);
  const e = t.engine();
  for (const h of [1n, 2n, 3n, 4n]) e.offloadEvicted(0n, h);
  let got = null as number | null;
  e.lookup([0n, 1n, 2n, 3n, 4n], 1, (n) => (got = n));
  expect(got).toBeNull();
  clock.advance((4 * 2.25 * 2 ** 20) / 25e6 - 0.001);
  expect(got).toBeNull();
  clock.advance(0.002);
  expect(got).toBe(4);
  let miss = null as number | null;
  e.lookup([7n], 0, (n) => (miss = n));
  expect(miss).toBe(0);
  expect(t.counters).toEqual({ stored: 4, evicted: 0, lookups: 2, loadedBlocks: 4 });
});

test("herd simulate --kv-tier-blocks: doc-QA on a small GPU cache, round-robin gains prefix hits and TTFT p95", async () => {
  const dir = mkdtempSync(join(tmpdir(), "herd-vtier-"));
  try {
    const run = async (tierBlocks: number) => {
      const file = join(dir, `t${tierBlocks}.json`);
      const argv = ["--workload", "doc-qa:documents=8", "--rate", "4", "--requests", "240", "--replicas", "2", "--policy", "round-robin", "--kv-blocks", "512", "--warmup", "5", "--kv-tier-blocks", String(tierBlocks), "--json", file];
      expect(await simulateMain(argv, { out: () => {}, err: () => {} })).toBe(0);
      const j = JSON.parse(readFileSync(file, "utf8")) as { config: { kv_tier_blocks: number }; runs: { summary: { ttft: { p95: number }; cached_tokens_ratio: number } }[] };
      expect(j.config.kv_tier_blocks).toBe(tierBlocks);
      return j.runs[0]!.summary;
    };
    const off = await run(0);
    const on = await run(20_000);
    expect(on.cached_tokens_ratio).toBeGreaterThan(off.cached_tokens_ratio + 0.1);
    expect(on.ttft.p95).toBeLessThan(off.ttft.p95);
    expect(await simulateMain(["--kv-tier-blocks", "-1", "--workload", "doc-qa"], { out: () => {}, err: () => {} })).toBe(2);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
