// One conformance suite over every TierStore implementation.
import { afterAll, describe, expect, test } from "bun:test";
import type { TierStore } from "../../src/tier/store.ts";
import { MapStore } from "../helpers/map-store.ts";
import { cleanupDirs, openTier, valueOf } from "./helpers.ts";

const MiB = 1024 * 1024;
const impls: [string, () => TierStore][] = [
  ["MapStore", () => new MapStore()],
  ["KvTier cpu", () => openTier({ cpuBytes: 8 * MiB }).tier],
  ["KvTier ssd", () => openTier({ ssdBytes: 8 * MiB }).tier],
  ["KvTier cpu+ssd", () => openTier({ cpuBytes: 2 * MiB, ssdBytes: 8 * MiB }).tier],
];

afterAll(cleanupDirs);

describe.each(impls)("TierStore conformance: %s", (_name, make) => {
  test("get returns exactly what put stored; a missing key is a miss", () => {
    const s = make();
    const v = valueOf("a", 1, 100_000);
    expect(s.put("a", v)).toBe(true);
    expect(Buffer.from(s.get("a")!).equals(Buffer.from(v))).toBe(true);
    expect(s.get("nope")).toBeUndefined();
  });

  test("put replaces; delete removes; has follows", () => {
    const s = make();
    s.put("k", valueOf("k", 1, 3000));
    s.put("k", valueOf("k", 2, 10));
    expect(Buffer.from(s.get("k")!).equals(Buffer.from(valueOf("k", 2, 10)))).toBe(true);
    expect(s.has("k")).toBe(true);
    expect(s.delete("k")).toBe(true);
    expect(s.delete("k")).toBe(false);
    expect(s.has("k")).toBe(false);
    expect(s.get("k")).toBeUndefined();
  });

  test("empty values and binary keys round-trip", () => {
    const s = make();
    const key = "model@1@0@\u00ff\u0000\u0001@half";
    expect(s.put(key, new Uint8Array(0))).toBe(true);
    expect(s.get(key)?.length).toBe(0);
    expect(s.has(key)).toBe(true);
  });

  test("list returns keys sorted, bounded by limit", () => {
    const s = make();
    for (const k of ["c", "a", "b"]) s.put(k, valueOf(k, 0, 64));
    expect(s.list()).toEqual(["a", "b", "c"]);
    expect(s.list(2)).toEqual(["a", "b"]);
  });
});
