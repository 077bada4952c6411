// Extent allocator for one CPU-tier segment: first fit over a free list kept sorted by offset, with
// neighbours coalesced on free. Pure data structure (no I/O); the catalog is the source of truth, so
// after a restart the allocator is rebuilt by marking every catalogued extent used (`reserve`).

/** Allocation granule: every extent starts and ends on a 64-byte boundary (one cache line). */
export const ALIGN_BYTES = 64;

export const alignUp = (n: number): number => Math.ceil(Math.max(1, n) / ALIGN_BYTES) * ALIGN_BYTES;

interface Extent {
  off: number;
  len: number;
}

export class ExtentAllocator {
  /** Free extents, sorted by offset, never adjacent (coalesced). */
  private free: Extent[];
  private usedBytes = 0;

  constructor(readonly capacityBytes: number) {
    const cap = Math.floor(capacityBytes / ALIGN_BYTES) * ALIGN_BYTES;
    this.free = cap > 0 ? [{ off: 0, len: cap }] : [];
  }

  get used(): number {
    return this.usedBytes;
  }

  /** Largest extent that could be allocated now. */
  largestFree(): number {
    let m = 0;
    for (const e of this.free) if (e.len > m) m = e.len;
    return m;
  }

  /** Offset of a new extent of alignUp(size) bytes, or undefined when no free extent is large enough. */
  alloc(size: number): number | undefined {
    const len = alignUp(size);
    for (let i = 0; i < this.free.length; i++) {
      const e = this.free[i]!;
      if (e.len < len) continue;
      const off = e.off;
      if (e.len === len) this.free.splice(i, 1);
      else {
        e.off += len;
        e.len -= len;
      }
      this.usedBytes += len;
      return off;
    }
    return undefined;
  }

  /** Mark [off, off+alignUp(size)) used (rebuild from the catalog). False when it is not wholly free. */
  reserve(off: number, size: number): boolean {
    const len = alignUp(size);
    const i = this.indexContaining(off);
    if (i < 0) return false;
    const e = this.free[i]!;
    if (off + len > e.off + e.len) return false;
    const before: Extent = { off: e.off, len: off - e.off };
    const after: Extent = { off: off + len, len: e.off + e.len - off - len };
    const repl = [before, after].filter((x) => x.len > 0);
    this.free.splice(i, 1, ...repl);
    this.usedBytes += len;
    return true;
  }

  release(off: number, size: number): void {
    const len = alignUp(size);
    // Insert position: first free extent starting after off (binary search).
    let lo = 0;
    let hi = this.free.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.free[mid]!.off < off) lo = mid + 1;
      else hi = mid;
    }
    const prev = this.free[lo - 1];
    const next = this.free[lo];
    if (prev && prev.off + prev.len > off) throw new Error(`double free at ${off}`);
    if (next && off + len > next.off) throw new Error(`double free at ${off}`);
    this.usedBytes -= len;
    const joinPrev = prev !== undefined && prev.off + prev.len === off;
    const joinNext = next !== undefined && off + len === next.off;
    if (joinPrev && joinNext) {
      prev.len += len + next.len;
      this.free.splice(lo, 1);
    } else if (joinPrev) prev.len += len;
    else if (joinNext) {
      next.off = off;
      next.len += len;
    } else this.free.splice(lo, 0, { off, len });
  }

  private indexContaining(off: number): number {
    let lo = 0;
    let hi = this.free.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const e = this.free[mid]!;
      if (off < e.off) hi = mid - 1;
      else if (off >= e.off + e.len) lo = mid + 1;
      else return mid;
    }
    return -1;
  }
}
