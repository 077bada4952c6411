// The catalog's open group (catalog.ts "pending"): rows written inside it are seen by every read and
// scan on this connection, reach SQLite at the commit, and nothing of the group is durable before it.
import { Database } from "bun:sqlite";
import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import { CRC_UNKNOWN, Catalog, type Row } from "../../src/tier/catalog.ts";
import { cleanupDirs, tempDirs } from "./helpers.ts";

afterAll(cleanupDirs);
const row = (key: string, access: number, tier: Row["tier"] = "cpu"): Row => ({ key, tier, loc: `0:${access * 64}:00000000000000${String(access).padStart(2, "0")}`, size: 10, charged: 64, crc: CRC_UNKNOWN, created_ms: access, access_ms: access, hits: 0, model: "" });
const committedKeys = (path: string) => {
  const db = new Database(path, { readonly: true });
  try {
    return db.query<{ key: string }, []>("SELECT key FROM objects ORDER BY key").all().map((r) => r.key);
  } finally {
    db.close();
  }
};

test("rows of the open group: seen by get, scans and touches; in SQLite at the commit; not durable before it", () => {
  const path = join(tempDirs().disk, "catalog.sqlite");
  const cat = new Catalog(path);
  cat.put(row("old", 1)); // outside a group: written through
  cat.begin();
  for (let v = 2; v < 6; v++) cat.put(row("a", v)); // replaced in the group: one pending row
  cat.put(row("b", 3));
  cat.delete("old");
  cat.move("b", "ssd", "f1", 4096, 7);
  expect(cat.get("a")!.access_ms).toBe(5);
  expect(cat.get("old")).toBeUndefined();
  expect(cat.get("b")).toMatchObject({ tier: "ssd", loc: "f1", charged: 4096, crc: 7 });
  cat.touch("a", 9);
  expect(cat.get("a")).toMatchObject({ access_ms: 9, hits: 1 });
  expect(committedKeys(path)).toEqual(["old"]); // a crash now would find the committed state
  expect(cat.coldest("ssd", 10).map((c) => c.key)).toEqual(["b"]); // a scan sees the group's rows
  expect(cat.keys(10)).toEqual(["a", "b"]);
  expect(cat.get("a")).toMatchObject({ access_ms: 9, hits: 1 });
  cat.put(row("c", 6));
  cat.commit();
  expect(committedKeys(path)).toEqual(["a", "b", "c"]);
  expect([...cat.rows()].find((r) => r.key === "a")).toMatchObject({ access_ms: 9, hits: 1 });
  cat.tx(() => cat.delete("c")); // a transaction outside the group writes through too
  expect(committedKeys(path)).toEqual(["a", "b"]);
  cat.close();
});
