// Making room and moving objects between media (tier.ts's KvTier): where a value goes, the quota's
// and the capacity's evictions (the policy's victims: CPU ones demoted to SSD when it can take them,
// SSD ones deleted), promotion back to CPU, and removal. Steps keep the order tier.ts states (data,
// then the row, then the old location released: group-commit.ts says when that is freed).

import { CRC_UNKNOWN, type Catalog, type Row } from "./catalog.ts";
import type { FailpointName, Failpoints } from "./failpoints.ts";
import type { GroupCommit } from "./group-commit.ts";
import type { TierChange } from "./index-feed.ts";
import type { Medium, TierName } from "./medium.ts";
import { CANDIDATE_WINDOW, type EvictionPolicy } from "./policy.ts";
import { type TierAccounts, keyCharge } from "./tier-accounts.ts";

export const crc32 = (b: Uint8Array): number => Bun.hash.crc32(b) >>> 0;

export interface RoomDeps {
  cat: Catalog;
  media: Partial<Record<TierName, Medium>>;
  acc: TierAccounts;
  group: GroupCommit;
  fp: Failpoints;
  policy: EvictionPolicy;
  nowMs: () => number;
  modelQuotaBytes: Readonly<Record<string, number>> | undefined;
  onChange: ((c: TierChange) => void) | undefined;
}

export class Room {
  constructor(private readonly d: RoomDeps) {}

  /** The medium a value goes to, after the model's quota made room for it; undefined when it cannot. */
  target(key: string, size: number, model: string, kc: number): Medium | undefined {
    this.d.group.begin();
    const target = this.placement(size, kc);
    if (!target) return undefined;
    const quota = this.d.modelQuotaBytes?.[model];
    if (quota !== undefined && target.charge(size) > quota) return undefined;
    if (quota !== undefined) this.enforceQuota(model, quota, target.charge(size), key);
    return target;
  }

  /** CPU when it can ever hold the value, else SSD, else nothing. */
  private placement(size: number, keyBytes: number): Medium | undefined {
    for (const m of [this.d.media.cpu, this.d.media.ssd]) {
      if (m && size <= m.maxObjectBytes && m.charge(size) + keyBytes <= m.capacityBytes) return m;
    }
    return undefined;
  }

  /** Evict from `m` until `size` bytes fit under its capacity and `place` finds a location for them. */
  writeWithRoom(
    m: Medium,
    size: number,
    fp: ((n: FailpointName) => void) | undefined,
    keyBytes: number,
    place: (fp: ((n: FailpointName) => void) | undefined) => string | undefined,
  ): string | undefined {
    const need = m.charge(size) + keyBytes;
    for (let round = 0; ; round++) {
      const used = m.usedBytes + this.d.acc.keyBytes[m.tier];
      if (used + need <= m.capacityBytes) {
        const loc = place(fp);
        if (loc !== undefined) return loc;
      }
      // Locations released by the open group are free once it commits: commit before evicting more.
      if (this.d.group.holds(m)) {
        this.d.group.flush();
        this.d.group.begin();
        continue;
      }
      // Over capacity, or fragmented (CPU): free the policy's choice of cold objects and retry.
      const shortBy = Math.max(used + need - m.capacityBytes, need);
      const victims = this.d.policy(this.d.cat.coldest(m.tier, CANDIDATE_WINDOW), shortBy, this.d.nowMs());
      if (victims.length === 0) return undefined;
      for (const k of victims) this.evictOne(m.tier, k);
      if (round > 1_000_000) return undefined;
    }
  }

  private evictOne(tier: TierName, key: string): void {
    const row = this.d.cat.get(key);
    if (!row || row.tier !== tier) return;
    this.d.acc.counters[tier].evictions++;
    if (tier === "cpu" && this.d.media.ssd && this.demote(row)) return;
    this.remove(row, true);
  }

  /** CPU → SSD. False when the object cannot go to SSD (too big, unreadable): the caller deletes it. */
  private demote(row: Row): boolean {
    const ssd = this.d.media.ssd!;
    const data = this.d.media.cpu!.read(row.loc, row.size);
    const kc = keyCharge(row.key);
    if (!data || ssd.charge(row.size) + kc > ssd.capacityBytes) return false;
    // The bytes leave shared memory here: checksum them now (a CRC known from an earlier SSD read must still match).
    const crc = crc32(data);
    if (row.crc !== CRC_UNKNOWN && crc !== row.crc) return false;
    const loc = this.writeWithRoom(ssd, data.length, undefined, kc, () => ssd.write(data));
    if (loc === undefined) return false;
    this.d.fp.hit("demote.after_write");
    this.d.cat.move(row.key, "ssd", loc, ssd.charge(row.size), crc);
    this.d.fp.hit("demote.after_commit");
    this.d.group.release(this.d.media.cpu!, row.loc, row.size);
    this.d.acc.moved(row, "ssd", ssd.charge(row.size));
    this.changed("removed", "cpu", row.key);
    this.changed("stored", "ssd", row.key);
    return true;
  }

  promote(row: Row, data: Uint8Array): Uint8Array | undefined {
    const cpu = this.d.media.cpu!;
    const copy = data; // a private buffer read from the file, untouched by the evictions below
    const kc = keyCharge(row.key);
    const loc = this.writeWithRoom(cpu, copy.length, undefined, kc, () => cpu.write(copy));
    if (loc === undefined) return undefined;
    this.d.fp.hit("promote.after_copy");
    const now = this.d.cat.get(row.key);
    if (!now || now.loc !== row.loc) {
      cpu.free(loc, row.size); // the object was evicted while making room: keep it where it went
      return copy;
    }
    this.d.cat.move(row.key, "cpu", loc, cpu.charge(row.size), row.crc);
    this.d.fp.hit("promote.after_commit");
    this.d.group.release(this.d.media.ssd!, row.loc, row.size);
    this.d.acc.moved(row, "cpu", cpu.charge(row.size));
    this.changed("removed", "ssd", row.key);
    this.changed("stored", "cpu", row.key);
    return cpu.read(loc, row.size);
  }

  private enforceQuota(model: string, quota: number, need: number, key: string): void {
    const own = this.d.cat.get(key);
    let used = this.d.acc.modelBytes(model) - (own && own.model === model ? own.charged : 0);
    while (used + need > quota) {
      const victims = this.d.cat.coldestOfModel(model, CANDIDATE_WINDOW).filter((r) => r.key !== key);
      if (victims.length === 0) return;
      for (const r of victims) {
        if (used + need <= quota) break;
        this.d.acc.counters[r.tier].evictions++;
        this.remove(r, true);
        used -= r.charged;
      }
    }
  }

  /** Delete the row, then free its data (crash in between: an orphan, reclaimed on open). */
  remove(row: Row, eviction = false): void {
    this.d.cat.delete(row.key);
    if (eviction) this.d.fp.hit("evict.after_commit");
    this.release(row);
    this.changed("removed", row.tier, row.key);
  }

  changed(kind: TierChange["kind"], tier: TierName, key: string): void {
    this.d.onChange?.({ kind, tier, key });
  }

  release(row: Row): void {
    const m = this.d.media[row.tier];
    if (m) this.d.group.release(m, row.loc, row.size);
    this.d.acc.removed(row);
  }
}
