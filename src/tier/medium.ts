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
  /** Optional (shm): claim a fresh location of `size` bytes without writing it; the caller fills read(loc). */
  allocate?(size: number): string | undefined;
  /** The bytes at `loc` (a view for shm: valid until that location is freed), or undefined if unreadable. */
  read(loc: string, size: number): Uint8Array | undefined;
  free(loc: string, size: number): void;
  /** Recovery: claim a catalogued location; false when it is invalid (missing file, overlap, bad size). */
  adopt(loc: string, size: number): boolean;
  /** Recovery, after every adopt: delete data no catalog row refers to; returns bytes reclaimed. */
  reclaimOrphans(): number;
  close(): void;
}
