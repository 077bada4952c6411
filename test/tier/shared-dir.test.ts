// Shared-directory mode: indexing vLLM fs-tier and LMCache fs:// files, capacity enforcement by
// coldness, and a reader that opened a file before its eviction still reads all of it.
import { afterAll, expect, test } from "bun:test";
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readSync, renameSync, utimesSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Catalog } from "../../src/tier/catalog.ts";
import { SharedDir } from "../../src/tier/shared-dir.ts";
import { cleanupDirs, tempDirs, valueOf } from "./helpers.ts";

afterAll(cleanupDirs);
const KiB = 1024;

/** Write like vLLM/LMCache: temporary name, then rename into place; times set for a known order. */
function engineWrite(root: string, rel: string, data: Uint8Array, ageS: number): void {
  const p = join(root, rel);
  mkdirSync(join(p, ".."), { recursive: true });
  writeFileSync(p + ".tmp", data);
  renameSync(p + ".tmp", p);
  const t = 1_700_000_000 - ageS;
  utimesSync(p, t, t);
}

const vllmPath = (i: number) => `Qwen_Qwen3-8B_0123456789ab_r0/abc/de_g0/${i.toString(16).padStart(64, "0")}.bin`;

test("indexes vLLM and LMCache files (not .tmp), evicts the coldest down to capacity", () => {
  const { disk } = tempDirs();
  const root = join(disk, "shared");
  const cat = new Catalog(join(disk, "c.sqlite"));
  const sd = new SharedDir(cat, root, 5 * 64 * KiB);
  for (let i = 0; i < 6; i++) engineWrite(root, vllmPath(i), valueOf("v", i, 64 * KiB), 100 - i); // 0 is coldest
  engineWrite(root, "meta-llama-SEP-Llama@1@0@ff@half.data", valueOf("l", 0, 64 * KiB), 1);
  writeFileSync(join(root, "partial.bin.tmp"), "x");
  sd.sync();
  const f = sd.figures();
  expect(f.used_bytes).toBe(5 * 64 * KiB);
  expect(f.objects).toBe(5);
  expect(f.evictions).toBe(2);
  expect(existsSync(join(root, vllmPath(0)))).toBe(false);
  expect(existsSync(join(root, vllmPath(1)))).toBe(false);
  expect(existsSync(join(root, vllmPath(2)))).toBe(true);
  expect(existsSync(join(root, "meta-llama-SEP-Llama@1@0@ff@half.data"))).toBe(true);
  expect(existsSync(join(root, "partial.bin.tmp"))).toBe(true); // not ours to judge
  expect(readdirSync(join(root, ".herd-evicting"))).toEqual([]);
  cat.close();
});

test("a reader that opened a file before eviction reads it whole; later opens miss", () => {
  const { disk } = tempDirs();
  const root = join(disk, "shared");
  const cat = new Catalog(join(disk, "c.sqlite"));
  const sd = new SharedDir(cat, root, 64 * KiB);
  const data = valueOf("r", 0, 64 * KiB);
  engineWrite(root, vllmPath(1), data, 50);
  const fd = openSync(join(root, vllmPath(1)), "r");
  const buf = Buffer.alloc(data.length);
  readSync(fd, buf, 0, 1000, 0); // mid-read
  utimesSync(join(root, vllmPath(1)), 1_699_000_000, 1_699_000_000); // that read bumped atime; make it cold again
  engineWrite(root, vllmPath(2), valueOf("r", 1, 64 * KiB), 1); // pushes vllmPath(1) out
  sd.sync();
  expect(existsSync(join(root, vllmPath(1)))).toBe(false);
  let off = 1000;
  while (off < data.length) off += readSync(fd, buf, off, data.length - off, off);
  closeSync(fd);
  expect(buf.equals(Buffer.from(data))).toBe(true);
  expect(() => openSync(join(root, vllmPath(1)), "r")).toThrow();
  cat.close();
});

test("many readers racing evictions: every read is the whole file or a clean miss", async () => {
  const { disk } = tempDirs();
  const root = join(disk, "shared");
  const cat = new Catalog(join(disk, "c.sqlite"));
  const sd = new SharedDir(cat, root, 8 * 32 * KiB);
  let whole = 0;
  let misses = 0;
  for (let round = 0; round < 20; round++) {
    for (let i = 0; i < 4; i++) engineWrite(root, vllmPath(round * 4 + i), valueOf("m", round * 4 + i, 32 * KiB), 1000 - round);
    const fds = Array.from({ length: 12 }, (_, k) => {
      const i = round * 4 - k + 3;
      try {
        return { i, fd: openSync(join(root, vllmPath(i)), "r") };
      } catch {
        misses++;
        return undefined;
      }
    });
    sd.sync();
    for (const r of fds) {
      if (!r) continue;
      const b = Buffer.alloc(32 * KiB);
      let off = 0;
      while (off < b.length) {
        const n = readSync(r.fd, b, off, b.length - off, off);
        if (n === 0) break;
        off += n;
      }
      closeSync(r.fd);
      expect(b.equals(Buffer.from(valueOf("m", r.i, 32 * KiB)))).toBe(true);
      whole++;
    }
    expect(sd.figures().used_bytes).toBeLessThanOrEqual(8 * 32 * KiB);
  }
  expect(whole).toBeGreaterThan(50);
  expect(misses).toBeGreaterThan(0);
  expect(sd.evictions).toBeGreaterThan(0);
  cat.close();
});
