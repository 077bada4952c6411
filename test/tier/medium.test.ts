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

describe("ShmMedium stamps", () => {
  const open = () => ShmMedium.open({ path: tempDirs().shm, capacityBytes: CAP, segmentBytes: 1 << 20 }, undefined);

  test("a location reads only while its extent carries its stamp; malformed locations never", () => {
    const m = open();
    const a = m.write(valueOf("a", 0, 4000))!;
    expect(a).toMatch(/^0:0:[0-9a-f]{16}$/);
    const [seg = "", off = ""] = a.split(":");
    const id = a.split(":")[2]!;
    // the pre-stamp format, a digit too many, a non-hex digit, an empty segment, another offset
    for (const bad of [`${seg}:${off}`, `${a}0`, a.slice(0, -1) + "g", `:${off}:${id}`, `0:64:${id}`]) {
      expect(m.read(bad, 4000)).toBeUndefined();
    }
    expect(m.read(a, 4001)).toBeUndefined(); // the stamp holds the size
    m.free(a, 4000);
    const b = m.write(valueOf("b", 0, 4000))!; // reuses the same extent
    expect(b.split(":").slice(0, 2)).toEqual([seg, off]);
    expect(m.read(a, 4000)).toBeUndefined();
    expect(Buffer.from(m.read(b, 4000)!).equals(Buffer.from(valueOf("b", 0, 4000)))).toBe(true);
  });

  test("an allocated extent is adoptable only once sealed", () => {
    const { shm } = tempDirs();
    const m = ShmMedium.open({ path: shm, capacityBytes: CAP, segmentBytes: 1 << 20 }, undefined);
    const s1 = m.allocate!(3000)!;
    const s2 = m.allocate!(3000)!;
    s1.bytes.fill(1);
    s2.bytes.fill(2);
    expect(m.read(s1.loc, 3000)).toBeUndefined(); // not sealed yet
    m.seal!(s1.loc, 3000);
    expect(m.read(s1.loc, 3000)![0]).toBe(1);
    const again = ShmMedium.open({ path: shm, capacityBytes: CAP, segmentBytes: 1 << 20 }, m.instance);
    expect(again.adopt(s1.loc, 3000)).toBe(true);
    expect(again.adopt(s2.loc, 3000)).toBe(false); // a crash before seal: its bytes are never adopted
  });
});
