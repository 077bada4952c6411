// SSD tier: one file per object under <path>/objects/<xx>/<id>.bin, where id is a fresh number per
// write (never reused while herd runs, restarted above the highest id found on disk). A write goes
// to a new file and only the catalog commit makes it live, so a crash leaves at worst an orphan file,
// which recovery deletes. Files are not fsync'ed: kill -9 keeps the page cache, and after power loss
// the checksum on read turns a torn file into a miss. Charge = size rounded up to 4 KiB blocks.
// Objects of 1 MiB or more use O_DIRECT (as vLLM's fs tier does when its probe passes): buffered writes
// of KV-sized files were throttled to a fraction of the device's rate (bench/kv-tier.ts), and KV
// read back once does not deserve the page cache. The write goes through a page-aligned staging
// buffer padded to 4 KiB, then the file is truncated to its exact size.

import { closeSync, constants, fstatSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, statSync, unlinkSync, writeSync } from "node:fs";
import { ptr } from "bun:ffi";
import { join } from "node:path";
import type { FailpointName } from "./failpoints.ts";
import type { Medium } from "./medium.ts";

const BLOCK_BYTES = 4096;
const DIRECT_MIN_BYTES = 1024 * 1024;

export class DirMedium implements Medium {
  readonly tier = "ssd" as const;
  readonly maxObjectBytes: number;
  private used = 0;
  private nextId = 1;
  private readonly live = new Set<string>();
  private readonly root: string;
  private readonly direct: boolean;
  private stage: Uint8Array = new Uint8Array(0);

  constructor(
    readonly path: string,
    readonly capacityBytes: number,
  ) {
    this.root = join(path, "objects");
    mkdirSync(this.root, { recursive: true, mode: 0o700 });
    this.maxObjectBytes = Math.floor(capacityBytes / BLOCK_BYTES) * BLOCK_BYTES;
    for (const f of this.files()) this.nextId = Math.max(this.nextId, idOf(f) + 1);
    this.direct = probeDirect(this.root);
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
    const direct = this.direct && data.length >= DIRECT_MIN_BYTES;
    const fd = openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | (direct ? constants.O_DIRECT : 0), 0o600);
    try {
      let src = data;
      if (direct) {
        const padded = this.charge(data.length);
        if (this.stage.length < padded) this.stage = alignedBuffer(padded);
        this.stage.set(data);
        this.stage.fill(0, data.length, padded);
        src = this.stage.subarray(0, padded);
      }
      const half = fp ? Math.floor(src.length / 2 / BLOCK_BYTES) * BLOCK_BYTES : src.length;
      writeAll(fd, src.subarray(0, half), 0);
      if (fp) {
        fp("set.mid_data");
        writeAll(fd, src.subarray(half), half);
      }
      if (direct) ftruncateSync(fd, data.length);
    } finally {
      closeSync(fd);
    }
    this.live.add(loc);
    this.used += this.charge(data.length);
    return loc;
  }

  read(loc: string, size: number): Uint8Array | undefined {
    try {
      if (!this.direct || size < DIRECT_MIN_BYTES) {
        const b = readFileSync(join(this.root, loc));
        return b.length === size ? b : undefined;
      }
      const fd = openSync(join(this.root, loc), constants.O_RDONLY | constants.O_DIRECT);
      try {
        if (fstatSync(fd).size !== size) return undefined;
        const b = this.readBuffer(this.charge(size));
        for (let off = 0; off < size; ) {
          const n = readSync(fd, b, off, b.length - off, off);
          if (n <= 0) return undefined;
          off += n;
        }
        return b.subarray(0, size);
      } finally {
        closeSync(fd);
      }
    } catch {
      return undefined;
    }
  }

  /**
   * The aligned buffer O_DIRECT reads into, reused: a fresh 16 MiB buffer per read costs 4,096 first
   * touches of new pages, which on this VM took longer than the read itself (bench/kv-tier.ts, SSD
   * row). A read's result is therefore valid until the next read, within the tier's contract (get
   * may return a view valid until the next call on the tier, src/tier/README.md "Invariants").
   * Objects over REUSE_MAX_BYTES get their own buffer, so the medium never holds more than that.
   */
  private scratch: Uint8Array | null = null;
  private readBuffer(n: number): Uint8Array {
    if (n > REUSE_MAX_BYTES) return alignedBuffer(n);
    if (this.scratch === null || this.scratch.length < n) this.scratch = alignedBuffer(n);
    return this.scratch.subarray(0, n);
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

function writeAll(fd: number, data: Uint8Array, position: number): void {
  for (let off = 0; off < data.length; ) off += writeSync(fd, data, off, data.length - off, position + off);
}

/** A page-aligned, not zero-filled buffer of n bytes (O_DIRECT needs aligned memory). */
/** Largest read served from the reused buffer (DirMedium.readBuffer). */
const REUSE_MAX_BYTES = 64 * 1024 * 1024;

function alignedBuffer(n: number): Uint8Array {
  const raw = Buffer.allocUnsafeSlow(n + BLOCK_BYTES);
  const off = (BLOCK_BYTES - (ptr(raw) % BLOCK_BYTES)) % BLOCK_BYTES;
  return raw.subarray(off, off + n);
}

/** Whether the file system at dir accepts O_DIRECT (tmpfs and some others do not). */
function probeDirect(dir: string): boolean {
  const p = join(dir, ".direct-probe");
  try {
    const fd = openSync(p, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_DIRECT, 0o600);
    try {
      writeSync(fd, alignedBuffer(BLOCK_BYTES).fill(0), 0, BLOCK_BYTES, 0);
      return true;
    } finally {
      closeSync(fd);
    }
  } catch {
    return false;
  } finally {
    try {
      unlinkSync(p);
    } catch {
      // Never created.
    }
  }
}
