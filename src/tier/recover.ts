// Opening the tier = reconciling catalog and data. Runs before anything is served:
// 1. CPU tier: attach to the shm segments only when their marker matches the catalog's record and the
//    boot id is unchanged; otherwise (reboot, /dev/shm wiped, size changed) the segments are created
//    empty and every CPU row is dropped, so the catalog says the CPU tier is empty.
// 2. Every row must claim a valid, non-overlapping location of the right size and, with
//    verify "full", match its CRC-32 (CPU rows never checksummed, CRC_UNKNOWN, are checked for size
//    and location only); rows that fail are dropped (counted in the report).
// 3. Data no surviving row refers to is reclaimed (SSD orphan files; unclaimed shm extents are free).

import { CRC_UNKNOWN, type Catalog, type Row } from "./catalog.ts";
import { DirMedium } from "./dir-medium.ts";
import type { Medium, TierName } from "./medium.ts";
import { ShmMedium } from "./shm-medium.ts";
import type { TierOptions } from "./tier.ts";

export interface RecoveryReport {
  /** True when the CPU tier started empty because of a reboot, a wiped /dev/shm or a new layout. */
  cpuReset: boolean;
  droppedRows: number;
  droppedCorrupt: number;
  orphanBytesReclaimed: number;
}

export function recover(cat: Catalog, opts: TierOptions): { media: Partial<Record<TierName, Medium>>; report: RecoveryReport } {
  const report: RecoveryReport = { cpuReset: false, droppedRows: 0, droppedCorrupt: 0, orphanBytesReclaimed: 0 };
  const media: Partial<Record<TierName, Medium>> = {};
  if (opts.cpu) {
    const sameBoot = cat.meta("boot_id") === opts.bootId;
    const shm = ShmMedium.open(opts.cpu, sameBoot ? cat.meta("shm_instance") : undefined);
    report.cpuReset = shm.fresh;
    cat.tx(() => {
      cat.setMeta("shm_instance", shm.instance);
      cat.setMeta("boot_id", opts.bootId);
    });
    media.cpu = shm;
  }
  if (opts.ssd) media.ssd = new DirMedium(opts.ssd.path, opts.ssd.capacityBytes);
  const crc = (b: Uint8Array) => Bun.hash.crc32(b) >>> 0;
  const drop: Row[] = [];
  for (const row of cat.rows()) {
    const m = media[row.tier];
    if (!m || (row.tier === "cpu" && report.cpuReset) || !m.adopt(row.loc, row.size)) {
      drop.push(row);
      continue;
    }
    if (opts.verifyOnOpen !== "size" && row.crc !== CRC_UNKNOWN) {
      const data = m.read(row.loc, row.size);
      if (!data || crc(data) !== row.crc) {
        m.free(row.loc, row.size);
        report.droppedCorrupt++;
        drop.push(row);
      }
    }
  }
  cat.tx(() => drop.forEach((r) => cat.delete(r.key)));
  report.droppedRows = drop.length;
  for (const m of Object.values(media)) report.orphanBytesReclaimed += m.reclaimOrphans();
  return { media, report };
}
