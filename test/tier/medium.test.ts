// One conformance suite over both media (CPU shared memory, SSD files).
import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { DirMedium } from "../../src/tier/dir-medium.ts";
import type { Medium } from "../../src/tier/medium.ts";
import { ShmMedium } from "../../src/tier/shm-medium.ts";
import { cleanupDirs, tempDirs, valueOf } from "./helpers.ts";

afterAll(cleanupDirs);
const CAP = 4 << 20;
const media: [string, () => { m: Medium; reopen: () => Medium }][] = [
  [
    "shm",
    () => {
      const { shm } = tempDirs();
      const m = ShmMedium.open({ path: shm, capacityBytes: CAP, segmentBytes: 1 << 20 }, undefined);
      return { m, reopen: () => ShmMedium.open({ path: shm, capacityBytes: CAP, segmentBytes: 1 << 20 }, m instanceof ShmMedium ? m.instance : undefined) };
    },
  ],
  [
    "dir",
    () => {
      const { disk } = tempDirs();
      return { m: new DirMedium(join(disk, "ssd"), CAP), reopen: () => new DirMedium(join(disk, "ssd"), CAP) };
    },
  ],
];

describe.each(media)("Medium conformance: %s", (_n, make) => {
  test("write returns a fresh location; read returns the bytes; free releases the charge", () => {
    const { m } = make();
    const a = m.write(valueOf("a", 0, 5000))!;
    const b = m.write(valueOf("b", 0, 70_000))!;
    expect(a).not.toBe(b);
    expect(Buffer.from(m.read(a, 5000)!).equals(Buffer.from(valueOf("a", 0, 5000)))).toBe(true);
    expect(m.usedBytes).toBe(m.charge(5000) + m.charge(70_000));
    m.free(a, 5000);
    expect(m.usedBytes).toBe(m.charge(70_000));
    expect(m.read("garbage", 10)).toBeUndefined();
  });

  test("a reopened medium adopts listed locations and reclaims the rest", () => {
    const { m, reopen } = make();
    const keep = m.write(valueOf("k", 0, 3000))!;
    m.write(valueOf("o", 0, 3000));
    const again = reopen();
    expect(again.adopt(keep, 3000)).toBe(true);
    expect(again.adopt(keep, 3000)).toBe(false); // no double claim
    again.reclaimOrphans();
    expect(again.usedBytes).toBe(again.charge(3000));
    expect(Buffer.from(again.read(keep, 3000)!).equals(Buffer.from(valueOf("k", 0, 3000)))).toBe(true);
  });

  test("write fails (undefined) instead of exceeding what fits", () => {
    const { m } = make();
    if (m.tier === "ssd") return expect(m.maxObjectBytes).toBe(CAP); // the tier enforces SSD capacity before writing
    const locs = [];
    for (let i = 0; i < 4; i++) locs.push(m.write(new Uint8Array(m.maxObjectBytes))); // one per 1 MiB segment
    expect(locs.every((l) => l !== undefined)).toBe(true);
    expect(m.write(new Uint8Array(64))).toBeUndefined();
  });
});
