// CPU tier: a set of file-backed shared-memory segments (default /dev/shm/herd/seg-NNNN.shm), each
// mmap'd MAP_SHARED and carved into 64-byte-aligned extents by an ExtentAllocator. The files outlive a
// crashed herd (tmpfs keeps them until reboot), so a restart re-attaches and keeps the CPU tier; a
// reboot empties /dev/shm, and the `instance` marker (a UUID the catalog also records) tells the
// catalog that its CPU rows are gone. Location = "<segment>:<offset>".

import { closeSync, existsSync, ftruncateSync, mkdirSync, openSync, readdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ExtentAllocator, alignUp } from "./allocator.ts";
import type { FailpointName } from "./failpoints.ts";
import type { Medium } from "./medium.ts";

export const DEFAULT_SEGMENT_BYTES = 1024 ** 3;
const MARKER = "instance";

export interface ShmOptions {
  path: string;
  capacityBytes: number;
  segmentBytes?: number;
}

interface Segment {
  map: Uint8Array;
  alloc: ExtentAllocator;
}

export class ShmMedium implements Medium {
  readonly tier = "cpu" as const;
  readonly maxObjectBytes: number;
  private readonly segs: Segment[];

  private constructor(
    readonly capacityBytes: number,
    segs: Segment[],
    /** UUID written in the marker file; the catalog stores it to recognise this set of segments. */
    readonly instance: string,
    /** True when the segments were (re)created empty: every CPU row in the catalog is stale. */
    readonly fresh: boolean,
  ) {
    this.segs = segs;
    this.maxObjectBytes = Math.max(0, ...segs.map((s) => s.alloc.capacityBytes));
  }

  /**
   * Attach to the segments at `path` when its marker says `expectInstance` and the layout matches;
   * otherwise delete them and create an empty set (after a reboot, or a size change).
   */
  static open(opts: ShmOptions, expectInstance: string | undefined): ShmMedium {
    const segBytes = alignUp(Math.min(opts.segmentBytes ?? DEFAULT_SEGMENT_BYTES, opts.capacityBytes));
    const sizes: number[] = [];
    for (let left = opts.capacityBytes; left >= 64; left -= segBytes) sizes.push(Math.floor(Math.min(segBytes, left) / 64) * 64);
    mkdirSync(opts.path, { recursive: true, mode: 0o700 });
    const marker = join(opts.path, MARKER);
    const found = existsSync(marker) ? readFileSync(marker, "utf8").trim() : undefined;
    const layoutOk = sizes.every((n, i) => fileSize(segPath(opts.path, i)) === n);
    const attach = found !== undefined && found === expectInstance && layoutOk;
    if (!attach) {
      for (const f of readdirSync(opts.path)) if (f.endsWith(".shm") || f === MARKER) unlinkSync(join(opts.path, f));
      sizes.forEach((n, i) => {
        const fd = openSync(segPath(opts.path, i), "w+", 0o600);
        ftruncateSync(fd, n);
        closeSync(fd);
      });
    }
    const instance = attach ? found! : crypto.randomUUID();
    if (!attach) writeFileSync(marker, instance + "\n", { mode: 0o600 });
    const segs = sizes.map((n, i) => ({ map: Bun.mmap(segPath(opts.path, i)), alloc: new ExtentAllocator(n) }));
    return new ShmMedium(opts.capacityBytes, segs, instance, !attach);
  }

  get usedBytes(): number {
    let u = 0;
    for (const s of this.segs) u += s.alloc.used;
    return u;
  }

  charge(size: number): number {
    return alignUp(size);
  }

  write(data: Uint8Array, fp?: (name: FailpointName) => void): string | undefined {
    for (let i = 0; i < this.segs.length; i++) {
      const s = this.segs[i]!;
      const off = s.alloc.alloc(data.length);
      if (off === undefined) continue;
      if (fp) {
        const half = data.length >> 1;
        s.map.set(data.subarray(0, half), off);
        fp("set.mid_data");
        s.map.set(data.subarray(half), off + half);
      } else s.map.set(data, off);
      return `${i}:${off}`;
    }
    return undefined;
  }

  allocate(size: number): string | undefined {
    for (let i = 0; i < this.segs.length; i++) {
      const off = this.segs[i]!.alloc.alloc(size);
      if (off !== undefined) return `${i}:${off}`;
    }
    return undefined;
  }

  read(loc: string, size: number): Uint8Array | undefined {
    const p = this.parse(loc, size);
    return p ? p.seg.map.subarray(p.off, p.off + size) : undefined;
  }

  free(loc: string, size: number): void {
    const p = this.parse(loc, size);
    if (p) p.seg.alloc.release(p.off, size);
  }

  adopt(loc: string, size: number): boolean {
    const p = this.parse(loc, size);
    return p !== undefined && p.seg.alloc.reserve(p.off, size);
  }

  /** Unclaimed extents are free by construction (the allocator starts empty), so nothing to delete. */
  reclaimOrphans(): number {
    return 0;
  }

  close(): void {
    // Bun unmaps when the views are collected; dropping references is all there is to do.
    this.segs.length = 0;
  }

  private parse(loc: string, size: number): { seg: Segment; off: number } | undefined {
    const m = /^(\d+):(\d+)$/.exec(loc);
    if (!m) return undefined;
    const seg = this.segs[Number(m[1])];
    const off = Number(m[2]);
    if (!seg || off % 64 !== 0 || off + size > seg.map.length) return undefined;
    return { seg, off };
  }
}

function segPath(dir: string, i: number): string {
  return join(dir, `seg-${String(i).padStart(4, "0")}.shm`);
}

function fileSize(p: string): number {
  try {
    return Bun.file(p).size;
  } catch {
    return -1;
  }
}
