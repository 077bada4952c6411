// Does the configured tier fit this host? A pure check over injected facts (gathered by `hostFacts`),
// so the refusal message is tested without a host of that shape.
//
// Why these rules: the CPU tier's pages live in tmpfs (/dev/shm), which is bounded by its mount size
// and, for pages herd writes, charged to herd's cgroup (systemd MemoryMax / memory.max), so the tier
// must fit both with room for herd itself. The SSD tier is files, bounded by the file system's free
// space. Space the tier already uses (a restart) counts as available.

import { readFileSync, readdirSync, statfsSync, statSync } from "node:fs";
import { join } from "node:path";

/** Memory herd itself needs besides the CPU tier (catalog cache, buffers, the router). */
export const HERD_HEADROOM_BYTES = 1024 ** 3;

export interface SizingFacts {
  /** Free bytes on the file system of the CPU tier path, plus bytes the tier already holds there. */
  cpuAvailableBytes?: number;
  ssdAvailableBytes?: number;
  /** The cgroup memory limit of this process, when there is one. */
  memoryMaxBytes?: number;
}

export interface SizingRequest {
  cpuBytes?: number;
  cpuPath?: string;
  ssdBytes?: number;
  ssdPath?: string;
}

const gib = (n: number) => `${(n / 1024 ** 3).toFixed(1)} GiB`;

/** Problems that must stop the start, each a full sentence with what to change. */
export function sizingProblems(req: SizingRequest, f: SizingFacts): string[] {
  const out: string[] = [];
  if (req.cpuBytes !== undefined && f.cpuAvailableBytes !== undefined && req.cpuBytes > f.cpuAvailableBytes) {
    out.push(
      `kv_tier.cpu.size (${gib(req.cpuBytes)}) does not fit ${req.cpuPath}: ${gib(f.cpuAvailableBytes)} available. ` +
        `Lower the size or grow /dev/shm (mount -o remount,size=… /dev/shm, or RuntimeDirectorySize/tmpfs size in fstab).`,
    );
  }
  if (req.cpuBytes !== undefined && f.memoryMaxBytes !== undefined && req.cpuBytes + HERD_HEADROOM_BYTES > f.memoryMaxBytes) {
    out.push(
      `kv_tier.cpu.size (${gib(req.cpuBytes)}) plus ${gib(HERD_HEADROOM_BYTES)} for herd exceeds this unit's memory limit ` +
        `(${gib(f.memoryMaxBytes)}): shared-memory pages herd writes are charged to its cgroup. Raise MemoryMax or lower the size.`,
    );
  }
  if (req.ssdBytes !== undefined && f.ssdAvailableBytes !== undefined && req.ssdBytes > f.ssdAvailableBytes) {
    out.push(`kv_tier.ssd.size (${gib(req.ssdBytes)}) does not fit ${req.ssdPath}: ${gib(f.ssdAvailableBytes)} available. Lower the size or free space.`);
  }
  return out;
}

/** Gather the facts for `req` on this host (Linux). */
export function hostFacts(req: SizingRequest): SizingFacts {
  const f: SizingFacts = {};
  if (req.cpuPath !== undefined) f.cpuAvailableBytes = available(req.cpuPath);
  if (req.ssdPath !== undefined) f.ssdAvailableBytes = available(req.ssdPath);
  const mem = cgroupMemoryMax();
  if (mem !== undefined) f.memoryMaxBytes = mem;
  return f;
}

/** Free bytes at `path` (or its nearest existing parent) plus what files under it already use. */
function available(path: string): number | undefined {
  let p = path;
  while (p.length > 1) {
    try {
      const s = statfsSync(p);
      return s.bavail * s.bsize + usedUnder(p === path ? p : "");
    } catch {
      p = join(p, "..");
    }
  }
  return undefined;
}

function usedUnder(dir: string): number {
  if (!dir) return 0;
  let n = 0;
  try {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      const p = join(dir, e.name);
      if (e.isDirectory()) n += usedUnder(p);
      else if (e.isFile()) n += statSync(p).blocks * 512;
    }
  } catch {
    // Unreadable: count nothing.
  }
  return n;
}

/** cgroup v2 memory.max or v1 memory.limit_in_bytes of this process; undefined when unlimited. */
export function cgroupMemoryMax(): number | undefined {
  try {
    for (const line of readFileSync("/proc/self/cgroup", "utf8").split("\n")) {
      const [, ctrl, rel] = line.split(":");
      if (rel === undefined) continue;
      const file =
        ctrl === "" ? join("/sys/fs/cgroup", rel, "memory.max") : ctrl === "memory" ? join("/sys/fs/cgroup/memory", rel, "memory.limit_in_bytes") : undefined;
      if (!file) continue;
      try {
        const v = readFileSync(file, "utf8").trim();
        const n = Number(v);
        if (v !== "max" && Number.isFinite(n) && n < 2 ** 62) return n;
      } catch {
        // Not mounted here.
      }
    }
  } catch {
    // Not Linux.
  }
  return undefined;
}
