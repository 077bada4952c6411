// What a crash loses (README "Invariants"): the open group. A CPU object deleted or replaced in it is
// a miss after the restart, not its previous version: its extent was unstamped when freed, so the
// committed row that still names it is dropped. The "crash" is the committed catalog copied while the
// group is open (its row writes are still in memory, catalog.ts), opened against the same segments.
import { afterAll, expect, test } from "bun:test";
import { copyFileSync, existsSync } from "node:fs";
import { join } from "node:path";
import { KvTier } from "../../src/tier/tier.ts";
import { cleanupDirs, openTier, tempDirs, valueOf } from "./helpers.ts";

afterAll(cleanupDirs);

function crashCopy(catalogPath: string, to: string): string {
  const dst = join(to, "crashed.sqlite");
  for (const ext of ["", "-wal"]) if (existsSync(catalogPath + ext)) copyFileSync(catalogPath + ext, dst + ext);
  return dst;
}

test("a CPU object deleted or replaced in the lost group is a miss after the restart; a committed one is kept", () => {
  const { tier, opts } = openTier({ cpuBytes: 8 << 20 });
  tier.put("m@1@0@del@half", valueOf("del", 1, 100_000));
  tier.put("m@1@0@rep@half", valueOf("rep", 1, 100_000));
  tier.put("m@1@0@keep@half", valueOf("keep", 1, 100_000));
  tier.flush(); // committed
  tier.delete("m@1@0@del@half"); // in the open group: extents freed (unstamped) at once
  tier.put("m@1@0@rep@half", valueOf("rep", 2, 50_000));
  const crashed = KvTier.open({ ...opts, catalogPath: crashCopy(opts.catalogPath, tempDirs().disk) });
  expect(crashed.recovery.cpuReset).toBe(false);
  expect(crashed.get("m@1@0@del@half")).toBeUndefined();
  expect(crashed.get("m@1@0@rep@half")).toBeUndefined();
  expect(Buffer.from(crashed.get("m@1@0@keep@half")!).equals(Buffer.from(valueOf("keep", 1, 100_000)))).toBe(true);
  expect(crashed.recovery.droppedRows).toBe(2);
  crashed.close();
  tier.close();
});
