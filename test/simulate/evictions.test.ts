import { expect, test } from "bun:test";
import { EvictionLog } from "../../src/simulate/evictions.ts";

test("eviction log: distance in evictions, re-store forgets, only the last `horizon` evictions are kept", () => {
  const log = new EvictionLog(3);
  log.evicted(10n);
  log.evicted(11n);
  expect(log.distance(10n)).toBe(2);
  expect(log.distance(11n)).toBe(1);
  expect(log.distance(12n)).toBeUndefined();
  log.stored(11n);
  expect(log.distance(11n)).toBeUndefined();
  log.evicted(0n); // the all-zero key is a valid hash too
  expect(log.distance(0n)).toBe(1);
  log.evicted(13n); // 4th eviction: 10n (the 1st) leaves the horizon
  expect(log.distance(10n)).toBeUndefined();
  expect(log.distance(13n)).toBe(1);
  log.evicted(2n ** 64n - 1n);
  log.evicted(10n); // evicted again: a fresh stamp that the ring's older slot must not erase
  log.evicted(14n);
  log.evicted(15n);
  expect(log.distance(10n)).toBe(3);
  expect(log.size).toBeLessThanOrEqual(3);
  // A block evicted twice: when its first eviction leaves the horizon, the newer stamp stays.
  const l2 = new EvictionLog(3);
  l2.evicted(1n);
  l2.evicted(1n);
  l2.evicted(2n);
  l2.evicted(3n);
  expect(l2.distance(1n)).toBe(3);
  l2.evicted(4n);
  expect(l2.distance(1n)).toBeUndefined();
});
