// A medium holds object bytes at opaque locations; the catalog maps keys to (medium, location). Two
// implementations: shm-medium.ts (CPU: mmap'd segments under /dev/shm) and dir-medium.ts (SSD: one file
// per object). Both are exercised by test/tier/medium.test.ts.

import type { FailpointName } from "./failpoints.ts";

export type TierName = "cpu" | "ssd";

export interface Medium {
  readonly tier: TierName;
  readonly capacityBytes: number;
  /** Bytes an object of `size` bytes occupies here (allocation granule / file-system block). */
  charge(size: number): number;
  /** Largest object this medium can ever hold. */
  readonly maxObjectBytes: number;
  /** Bytes currently charged for live locations (adopted + written − freed). */
  readonly usedBytes: number;
  /**
   * Store `data` at a fresh location (never over a live one) and return it, or undefined when no
   * space is free (the tier evicts and retries). `fp` is called half-way through for crash tests.
   */
  write(data: Uint8Array, fp?: (name: FailpointName) => void): string | undefined;
  /** Optional (shm): claim a fresh location of `size` bytes without writing it; the caller fills
   * `bytes`, then seal(loc) makes it readable (and adoptable after a crash). */
  allocate?(size: number): { loc: string; bytes: Uint8Array } | undefined;
  seal?(loc: string, size: number): void;
  /** The bytes at `loc` (a view for shm: valid until that location is freed), or undefined if unreadable.
   * A shm view is framed as a RESP bulk reply: `$<size>\r\n` before it, CRLF after (shm-medium.ts). */
  read(loc: string, size: number): Uint8Array | undefined;
  free(loc: string, size: number): void;
  /** True when a freed location can never be adopted again by a row that still names it (shm: the
   * extent is unstamped on free, shm-medium.ts), so the tier frees it at once; otherwise (SSD files)
   * it frees only after the catalog commit that stops naming it (tier.ts, group commit). */
  readonly freesAtOnce?: boolean;
  /** Recovery: claim a catalogued location; false when it is invalid (missing file, overlap, bad size). */
  adopt(loc: string, size: number): boolean;
  /** Recovery, after every adopt: delete data no catalog row refers to; returns bytes reclaimed. */
  reclaimOrphans(): number;
  close(): void;
}
