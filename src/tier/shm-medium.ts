// CPU tier: a set of file-backed shared-memory segments (default /dev/shm/herd/seg-NNNN.shm), each
// mmap'd MAP_SHARED and carved into 64-byte-aligned extents by an ExtentAllocator. The files outlive a
// crashed herd (tmpfs keeps them until reboot), so a restart re-attaches and keeps the CPU tier; a
// reboot empties /dev/shm, and the `instance` marker (a UUID the catalog also records) tells the
// catalog that its CPU rows are gone. Location = "<segment>:<offset>:<stamp>".
//
// An extent is [64-byte header][value][CRLF]. The header holds a stamp (magic, value size, and a
// 64-bit id unique to this write: a random epoch per open + a counter) and, right-aligned against
// the value, the value's RESP bulk header `$<size>\r\n`; the CRLF after the value ends the reply, so
// a RESP GET writes one contiguous view (`framed`) instead of joining three parts in a copy.
// The stamp is what lets the tier free a replaced or evicted extent at once instead of after the
// catalog's next commit (tier.ts): its order of writes is zero the stamp, write the value, write the
// stamp; `free` zeroes the stamp before the extent can be reused. So a location whose row a crash
// left in the committed catalog is adopted on open only if its stamp is the one the row names — a
// reused (and possibly half-overwritten) extent was unstamped first, and a stamp is written only
// after its whole value. Reads check it too (an allocator bug handing an extent out twice is a miss).

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
  /** The same bytes as 32-bit words (stamps are at 64-byte-aligned offsets). */
  words: Uint32Array;
  alloc: ExtentAllocator;
}

/** Bytes before a value in its extent (stamp + RESP bulk header); the value stays 64-byte aligned. */
export const SHM_HEADER_BYTES = 64;
/** The CRLF after a value (the end of its RESP bulk reply). */
const TRAILER_BYTES = 2;
const MAGIC = 0x3176_6b68; // "hkv1"
/** Words of a stamp: magic, size, epoch, counter. */
const W_MAGIC = 0;
const W_SIZE = 1;
const W_EPOCH = 2;
const W_SEQ = 3;
const CR = 13;
const LF = 10;

export class ShmMedium implements Medium {
  readonly tier = "cpu" as const;
  readonly freesAtOnce = true;
  readonly maxObjectBytes: number;
  private readonly segs: Segment[];
  private epoch = randomU32();
  private seq = 0;

  private constructor(
    readonly capacityBytes: number,
    segs: Segment[],
    /** UUID written in the marker file; the catalog stores it to recognise this set of segments. */
    readonly instance: string,
    /** True when the segments were (re)created empty: every CPU row in the catalog is stale. */
    readonly fresh: boolean,
  ) {
    this.segs = segs;
    this.maxObjectBytes = Math.max(0, ...segs.map((s) => s.alloc.capacityBytes - SHM_HEADER_BYTES - TRAILER_BYTES));
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
    const segs = sizes.map((n, i) => {
      const map = Bun.mmap(segPath(opts.path, i));
      return { map, words: new Uint32Array(map.buffer, map.byteOffset, map.length >>> 2), alloc: new ExtentAllocator(n) };
    });
    return new ShmMedium(opts.capacityBytes, segs, instance, !attach);
  }

  get usedBytes(): number {
    let u = 0;
    for (const s of this.segs) u += s.alloc.used;
    return u;
  }

  charge(size: number): number {
    return shmCharge(size);
  }

  write(data: Uint8Array, fp?: (name: FailpointName) => void): string | undefined {
    const size = data.length;
    for (let i = 0; i < this.segs.length; i++) {
      const s = this.segs[i]!;
      const off = s.alloc.alloc(size + SHM_HEADER_BYTES + TRAILER_BYTES);
      if (off === undefined) continue;
      this.frame(s, off, size);
      const at = off + SHM_HEADER_BYTES;
      if (fp) {
        const half = size >> 1;
        s.map.set(data.subarray(0, half), at);
        fp("set.mid_data");
        s.map.set(data.subarray(half), at + half);
      } else s.map.set(data, at);
      return this.stamp(i, s, off, size);
    }
    return undefined;
  }

  /** An extent for `size` bytes, unstamped: the caller fills `bytes`, then calls seal(loc). */
  allocate(size: number): { loc: string; bytes: Uint8Array } | undefined {
    for (let i = 0; i < this.segs.length; i++) {
      const s = this.segs[i]!;
      const off = s.alloc.alloc(size + SHM_HEADER_BYTES + TRAILER_BYTES);
      if (off === undefined) continue;
      this.frame(s, off, size);
      const at = off + SHM_HEADER_BYTES;
      return { loc: locOf(i, off, this.nextEpoch(), this.seq), bytes: s.map.subarray(at, at + size) };
    }
    return undefined;
  }

  /** The value of an allocate()d location is complete: stamp it (only now can a row adopt it). */
  seal(loc: string, size: number): void {
    const p = this.parse(loc, size, false);
    if (!p) return;
    const w = p.off >>> 2;
    p.seg.words[w + W_SIZE] = size;
    p.seg.words[w + W_EPOCH] = p.epoch;
    p.seg.words[w + W_SEQ] = p.seq;
    p.seg.words[w + W_MAGIC] = MAGIC; // last: the stamp is whole only with its magic
  }

  read(loc: string, size: number): Uint8Array | undefined {
    const p = this.parse(loc, size);
    if (!p) return undefined;
    const at = p.off + SHM_HEADER_BYTES;
    return p.seg.map.subarray(at, at + size);
  }

  free(loc: string, size: number): void {
    const p = this.parse(loc, size, false);
    if (!p) return;
    // Unstamp first: once released, the extent may be reused and overwritten before the catalog's next commit.
    unstamp(p.seg.words, p.off);
    p.seg.alloc.release(p.off, size + SHM_HEADER_BYTES + TRAILER_BYTES);
  }

  adopt(loc: string, size: number): boolean {
    const p = this.parse(loc, size);
    return p !== undefined && p.seg.alloc.reserve(p.off, size + SHM_HEADER_BYTES + TRAILER_BYTES);
  }

  /** Unclaimed extents are free by construction (the allocator starts empty), so nothing to delete. */
  reclaimOrphans(): number {
    return 0;
  }

  close(): void {
    // Bun unmaps when the views are collected; dropping references is all there is to do.
    this.segs.length = 0;
  }

  /** Unstamp a fresh extent, then write the RESP bulk header before the value and CRLF after it. */
  private frame(s: Segment, off: number, size: number): void {
    unstamp(s.words, off);
    // `$<size>\r\n` right-aligned against the value, digits written backwards (no string, no encoder)
    const m = s.map;
    let at = off + SHM_HEADER_BYTES;
    m[--at] = LF;
    m[--at] = CR;
    let x = size;
    do {
      m[--at] = 0x30 + (x % 10);
      x = Math.floor(x / 10);
    } while (x > 0);
    m[--at] = 0x24; // "$"
    s.map[off + SHM_HEADER_BYTES + size] = CR;
    s.map[off + SHM_HEADER_BYTES + size + 1] = LF;
  }

  private stamp(i: number, s: Segment, off: number, size: number): string {
    const w = off >>> 2;
    const epoch = this.nextEpoch();
    s.words[w + W_SIZE] = size;
    s.words[w + W_EPOCH] = epoch;
    s.words[w + W_SEQ] = this.seq;
    s.words[w + W_MAGIC] = MAGIC;
    return locOf(i, off, epoch, this.seq);
  }

  /** A fresh (epoch, seq) per write; a new random epoch when the counter wraps. */
  private nextEpoch(): number {
    this.seq = (this.seq + 1) >>> 0;
    if (this.seq === 0) this.epoch = randomU32();
    return this.epoch;
  }

  /** The extent a location names, if it is well-formed, fits, and (`stamped`) carries the location's stamp. */
  private parse(loc: string, size: number, stamped = true): { seg: Segment; off: number; epoch: number; seq: number } | undefined {
    if (!parseLoc(loc)) return undefined;
    const seg = this.segs[LOC_SCRATCH.seg];
    const { off, epoch, seq } = LOC_SCRATCH;
    if (!seg || off % 64 !== 0 || off + SHM_HEADER_BYTES + size + TRAILER_BYTES > seg.map.length) return undefined;
    if (stamped) {
      const w = off >>> 2;
      const ws = seg.words;
      if (ws[w + W_MAGIC] !== MAGIC || ws[w + W_SIZE] !== size || ws[w + W_EPOCH] !== epoch || ws[w + W_SEQ] !== seq) return undefined;
    }
    return { seg, off, epoch, seq };
  }
}

const unstamp = (words: Uint32Array, off: number): void => {
  const w = off >>> 2;
  words[w + W_MAGIC] = 0; // first: without its magic the stamp is no stamp
  words[w + W_SIZE] = 0;
  words[w + W_EPOCH] = 0;
  words[w + W_SEQ] = 0;
};

/** parseLoc's result (one per process: parse() copies it out before any other call). */
const LOC_SCRATCH = { seg: 0, off: 0, epoch: 0, seq: 0 };

/** `<seg>:<off>:<16 hex digits>` into LOC_SCRATCH without a regex or substrings (reads, frees and
 * adoptions each parse one: the regex was ~15 % of a 64-byte put's profile). */
function parseLoc(loc: string): boolean {
  const n = loc.length;
  let i = 0;
  let seg = 0;
  let off = 0;
  const start = i;
  for (; i < n && loc.charCodeAt(i) !== 58; i++) {
    const d = loc.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return false;
    seg = seg * 10 + d;
  }
  if (i === start || i >= n || i - start > 6) return false;
  const offStart = ++i;
  for (; i < n && loc.charCodeAt(i) !== 58; i++) {
    const d = loc.charCodeAt(i) - 48;
    if (d < 0 || d > 9) return false;
    off = off * 10 + d;
  }
  if (i === offStart || i - offStart > 15 || n - i - 1 !== 16) return false;
  i++;
  let epoch = 0;
  let seq = 0;
  for (let k = 0; k < 16; k++) {
    const c = loc.charCodeAt(i + k);
    const h = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : -1;
    if (h < 0) return false;
    if (k < 8) epoch = epoch * 16 + h;
    else seq = seq * 16 + h;
  }
  LOC_SCRATCH.seg = seg;
  LOC_SCRATCH.off = off;
  LOC_SCRATCH.epoch = epoch;
  LOC_SCRATCH.seq = seq;
  return true;
}

/** Bytes an object of `size` bytes is charged in the CPU tier: its extent (header, value, CRLF). */
export const shmCharge = (size: number): number => alignUp(size + SHM_HEADER_BYTES + TRAILER_BYTES);

const hex8 = (n: number): string => n.toString(16).padStart(8, "0");
const locOf = (i: number, off: number, epoch: number, seq: number): string => `${i}:${off}:${hex8(epoch)}${hex8(seq)}`;
const randomU32 = (): number => crypto.getRandomValues(new Uint32Array(1))[0]!;

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
