import { mkdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { VirtualClock } from "../../src/core/clock.ts";
import { KvTier, type TierOptions } from "../../src/tier/tier.ts";

let n = 0;
const made: string[] = [];

/** A fresh directory under /dev/shm (CPU tier) and one under /tmp (SSD tier + catalog). */
export function tempDirs(): { shm: string; disk: string } {
  const id = `herd-tier-test-${process.pid}-${n++}`;
  const shm = join("/dev/shm", id);
  const disk = join("/tmp", id);
  mkdirSync(disk, { recursive: true });
  made.push(shm, disk);
  return { shm, disk };
}

export function cleanupDirs(): void {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
}

export interface TierSetup {
  cpuBytes?: number;
  ssdBytes?: number;
  segmentBytes?: number;
}

export function tierOptions(dirs: { shm: string; disk: string }, s: TierSetup, extra: Partial<TierOptions> = {}): TierOptions {
  return {
    catalogPath: join(dirs.disk, "catalog.sqlite"),
    ...(s.cpuBytes ? { cpu: { path: dirs.shm, capacityBytes: s.cpuBytes, ...(s.segmentBytes ? { segmentBytes: s.segmentBytes } : {}) } } : {}),
    ...(s.ssdBytes ? { ssd: { path: join(dirs.disk, "ssd"), capacityBytes: s.ssdBytes } } : {}),
    clock: new VirtualClock(1000),
    bootId: "boot-a",
    ...extra,
  };
}

export function openTier(s: TierSetup, extra: Partial<TierOptions> = {}): { tier: KvTier; opts: TierOptions } {
  const opts = tierOptions(tempDirs(), s, extra);
  return { tier: KvTier.open(opts), opts };
}

/** Deterministic value: `len` bytes derived from (key, version); self-describing for crash checks. */
export function valueOf(key: string, version: number, len: number): Uint8Array {
  const out = new Uint8Array(len);
  let x = (Bun.hash.crc32(`${key}#${version}`) >>> 0) | 1;
  for (let i = 0; i < len; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    out[i] = x & 0xff;
  }
  return out;
}
