// SSD tier: one file per object under <path>/objects/<xx>/<id>.bin, where id is a fresh number per
// write (never reused while herd runs, restarted above the highest id found on disk). A write goes
// to a new file and only the catalog commit makes it live, so a crash leaves at worst an orphan file,
// which recovery deletes. Files are not fsync'ed: kill -9 keeps the page cache, and after power loss
// the checksum on read turns a torn file into a miss. Charge = size rounded up to 4 KiB blocks.

import { closeSync, mkdirSync, openSync, readdirSync, readFileSync, statSync, unlinkSync, writeSync } from "node:fs";
import { join } from "node:path";
import type { FailpointName } from "./failpoints.ts";
import type { Medium } from "./medium.ts";

const BLOCK_BYTES = 4096;

export class DirMedium implements Medium {
  readonly tier = "ssd" as const;
  readonly maxObjectBytes: number;
  private used = 0;
  private nextId = 1;
  private readonly live = new Set<string>();
  private readonly root: string;

  constructor(
    readonly path: string,
    readonly capacityBytes: number,
  ) {
    this.root = join(path, "objects");
    mkdirSync(this.root, { recursive: true, mode: 0o700 });
    this.maxObjectBytes = Math.floor(capacityBytes / BLOCK_BYTES) * BLOCK_BYTES;
    for (const f of this.files()) this.nextId = Math.max(this.nextId, idOf(f) + 1);
  }

  get usedBytes(): number {
    return this.used;
  }

  charge(size: number): number {
    return Math.ceil(Math.max(1, size) / BLOCK_BYTES) * BLOCK_BYTES;
  }

  write(data: Uint8Array, fp?: (name: FailpointName) => void): string | undefined {
    const id = this.nextId++;
    const loc = `${(id % 256).toString(16).padStart(2, "0")}/${id.toString(36)}.bin`;
    const file = join(this.root, loc);
    mkdirSync(join(this.root, loc.slice(0, 2)), { recursive: true, mode: 0o700 });
    const fd = openSync(file, "wx", 0o600);
    try {
      const half = fp ? data.length >> 1 : data.length;
      writeAll(fd, data.subarray(0, half));
      if (fp) {
        fp("set.mid_data");
        writeAll(fd, data.subarray(half));
      }
    } finally {
      closeSync(fd);
    }
    this.live.add(loc);
    this.used += this.charge(data.length);
    return loc;
  }

  read(loc: string, size: number): Uint8Array | undefined {
    try {
      const b = readFileSync(join(this.root, loc));
      return b.length === size ? b : undefined;
    } catch {
      return undefined;
    }
  }

  free(loc: string, size: number): void {
    if (!this.live.delete(loc)) return;
    this.used -= this.charge(size);
    try {
      unlinkSync(join(this.root, loc));
    } catch {
      // Already gone: the object is deleted either way.
    }
  }

  adopt(loc: string, size: number): boolean {
    if (this.live.has(loc) || !/^[0-9a-f]{2}\/[0-9a-z]+\.bin$/.test(loc)) return false;
    try {
      if (statSync(join(this.root, loc)).size !== size) return false;
    } catch {
      return false;
    }
    this.live.add(loc);
    this.used += this.charge(size);
    return true;
  }

  reclaimOrphans(): number {
    let bytes = 0;
    for (const f of this.files()) {
      if (this.live.has(f)) continue;
      const p = join(this.root, f);
      try {
        bytes += statSync(p).size;
        unlinkSync(p);
      } catch {
        // Raced with nothing (herd is the only writer); ignore.
      }
    }
    return bytes;
  }

  close(): void {}

  private *files(): Generator<string> {
    for (const d of readdirSync(this.root)) {
      if (!/^[0-9a-f]{2}$/.test(d)) continue;
      for (const f of readdirSync(join(this.root, d))) yield `${d}/${f}`;
    }
  }
}

function idOf(loc: string): number {
  const n = parseInt(loc.slice(3).replace(/\.bin$/, ""), 36);
  return Number.isFinite(n) ? n : 0;
}

function writeAll(fd: number, data: Uint8Array): void {
  for (let off = 0; off < data.length; ) off += writeSync(fd, data, off, data.length - off);
}
