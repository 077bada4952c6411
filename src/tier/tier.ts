// KvTier: the CPU (shm) + SSD tier behind one catalog. Writes go to the CPU tier when there is one;
// making room demotes the policy's victims to SSD, and making room on SSD deletes them. A read from
// SSD promotes the object back to CPU. Bytes are checksummed (CRC-32) where they cross a medium: an
// SSD read is checked against the stored CRC-32 (a mismatch drops the object and is a miss); a CPU
// object's CRC is computed when it leaves shared memory (demotion, a peer fetch), not at every put and
// in-process read (README.md "Invariants" says why). Capacities are charged in allocation units and
// never exceeded.
//
// Order of steps (what makes kill -9 safe; see recover.ts and README.md): data is written to a fresh
// location first, the catalog commit makes it live, and only then is the old location freed. A crash
// between steps leaves an orphan (reclaimed on open) and never a row pointing at partial data.
// Group commit (group-commit.ts): catalog writes go into one open transaction, committed every
// GROUP_COMMIT_ROWS changes or GROUP_COMMIT_MS after the first. Shared memory released meanwhile is
// freed at once (shm-medium.ts unstamps it, so a row the crash left behind cannot adopt it), SSD files
// only after the commit. A crash loses at most the last group's changes: those objects, and the
// CPU objects it replaced, evicted or demoted, become misses (a cache).
// `reserve` is put in two halves for a caller that writes the value in place (the RESP server's SET):
// room and an extent now, the row at commit; until then no row names the extent.

import type { Clock } from "../core/clock.ts";
import { CRC_UNKNOWN, Catalog, type Row } from "./catalog.ts";
import { GroupCommit } from "./group-commit.ts";
import { TierAccounts, type TierCounters, keyCharge } from "./tier-accounts.ts";
import { type FailpointName, Failpoints, NO_FAILPOINTS } from "./failpoints.ts";
import type { Medium, TierName } from "./medium.ts";
import { CANDIDATE_WINDOW, POLICIES, type PolicyName } from "./policy.ts";
import { modelOfKey, type PutSlot, type TierStore } from "./store.ts";
import { recover, type RecoveryReport } from "./recover.ts";
import type { ShmOptions } from "./shm-medium.ts";
import type { TierChange } from "./index-feed.ts";

export interface TierOptions {
  catalogPath: string;
  /** An already open catalog (shared with shared-directory mode); else one is opened at catalogPath. */
  catalog?: Catalog;
  cpu?: ShmOptions;
  ssd?: { path: string; capacityBytes: number };
  policy?: PolicyName;
  /** Bytes a model's objects may occupy over both tiers; a model at its quota evicts its own coldest. */
  modelQuotaBytes?: Readonly<Record<string, number>>;
  clock: Clock;
  failpoints?: Failpoints;
  /** This boot's id (Linux: /proc/sys/kernel/random/boot_id); a different one empties the CPU tier. */
  bootId: string;
  /** Called after each committed change of what a tier holds (router index feed: index-feed.ts). */
  onChange?: (c: TierChange) => void;
  /** Verify every object's checksum when opening ("full") or only sizes and existence ("size"). */
  verifyOnOpen?: "full" | "size";
}

export { GROUP_COMMIT_FREED_BYTES, GROUP_COMMIT_MS, GROUP_COMMIT_ROWS } from "./group-commit.ts";
export { KEY_FREE_BYTES, type TierCounters, keyCharge } from "./tier-accounts.ts";

export const crc32 = (b: Uint8Array): number => Bun.hash.crc32(b) >>> 0;

export class KvTier implements TierStore {
  readonly media: Partial<Record<TierName, Medium>>;
  readonly recovery: RecoveryReport;
  corrupt = 0;
  private readonly acc = new TierAccounts();
  private readonly group: GroupCommit;
  private readonly fp: Failpoints;
  private readonly policy;
  private readonly timeBase: number;
  private readonly clockAtOpen: number;

  private constructor(
    private readonly cat: Catalog,
    private readonly opts: TierOptions,
  ) {
    this.fp = opts.failpoints ?? NO_FAILPOINTS;
    this.policy = POLICIES[opts.policy ?? "lru"];
    const r = recover(cat, opts);
    this.media = r.media;
    this.recovery = r.report;
    this.group = new GroupCommit(cat, opts.clock);
    for (const row of cat.rows()) this.acc.added(row);
    // Logical time continues from the newest access in the catalog, so LRU order survives restarts
    // although the injected clock restarts from its own epoch.
    this.timeBase = cat.maxAccessMs() + 1;
    this.clockAtOpen = opts.clock.now();
  }

  static open(opts: TierOptions): KvTier {
    if (!opts.cpu && !opts.ssd) throw new Error("kv tier: neither a cpu nor an ssd tier is configured");
    return new KvTier(opts.catalog ?? new Catalog(opts.catalogPath), opts);
  }

  /** Hits, misses, evictions and objects per tier. */
  get counters(): Record<TierName, TierCounters> {
    return this.acc.counters;
  }

  /** keyCharge() of the keys held in each tier, counted against its capacity with the media's bytes. */
  get keyBytes(): Record<TierName, number> {
    return this.acc.keyBytes;
  }

  nowMs(): number {
    return this.timeBase + (this.opts.clock.now() - this.clockAtOpen);
  }

  put(key: string, data: Uint8Array, model = modelOfKey(key)): boolean {
    const kc = keyCharge(key);
    const target = this.room(key, data.length, model, kc);
    if (!target) return false;
    const loc = this.writeWithRoom(target, data.length, (n) => this.fp.hit(n), kc, (fp) => target.write(data, fp));
    if (loc === undefined) return false;
    this.stored(key, target, loc, data.length, model, kc, target.tier === "cpu" ? CRC_UNKNOWN : crc32(data));
    return true;
  }

  /**
   * A fresh CPU location for a value of `size` bytes that the caller fills before `commit()` (the RESP
   * server parses a SET's payload straight into it: one copy from the socket's chunk instead of two).
   * Room is made now, as put would; the location is in no catalog row until commit, so a crash before
   * it leaves an orphan extent (reclaimed on open) and never a row pointing at partial data.
   * Undefined when the value would not go to the CPU tier: the caller falls back to put().
   */
  reserve(key: string, size: number, model = modelOfKey(key)): PutSlot | undefined {
    const cpu = this.media.cpu;
    if (!cpu?.allocate || !cpu.seal) return undefined;
    const kc = keyCharge(key);
    const target = this.room(key, size, model, kc);
    if (target !== cpu) return undefined;
    let bytes: Uint8Array | undefined;
    const loc = this.writeWithRoom(cpu, size, undefined, kc, () => {
      const a = cpu.allocate!(size);
      bytes = a?.bytes;
      return a?.loc;
    });
    if (loc === undefined || !bytes) return undefined;
    // Until it is committed or aborted the slot counts against the model's quota and the key bytes of
    // the CPU tier, so that slots open at once on several connections cannot overshoot either.
    const charged = cpu.charge(size);
    const hold = (sign: number) => {
      this.acc.addModel(model, sign * charged);
      this.acc.keyBytes.cpu += sign * kc;
    };
    hold(1);
    let open = true;
    return {
      bytes,
      commit: () => {
        if (!open) return false;
        open = false;
        hold(-1);
        cpu.seal!(loc, size); // the value is whole: only now may a row name it
        this.group.begin();
        this.stored(key, cpu, loc, size, model, kc, CRC_UNKNOWN);
        return true;
      },
      abort: () => {
        if (!open) return;
        open = false;
        hold(-1);
        cpu.free(loc, size); // no row names it: free at once
      },
    };
  }

  /** The medium a value goes to, after the model's quota made room for it; undefined when it cannot. */
  private room(key: string, size: number, model: string, kc: number): Medium | undefined {
    this.group.begin();
    const target = this.placement(size, kc);
    if (!target) return undefined;
    const quota = this.opts.modelQuotaBytes?.[model];
    if (quota !== undefined && target.charge(size) > quota) return undefined;
    if (quota !== undefined) this.enforceQuota(model, quota, target.charge(size), key);
    return target;
  }

  /** The value's bytes are at `loc`: its row goes into the open group, then the old copy is released. */
  private stored(key: string, target: Medium, loc: string, size: number, model: string, kc: number, crc: number): void {
    this.fp.hit("set.after_data");
    const now = this.nowMs();
    const row: Row = { key, tier: target.tier, loc, size, charged: target.charge(size), crc, created_ms: now, access_ms: now, hits: 0, model };
    // Read the old row only now: making room may have demoted or evicted it.
    const prev = this.cat.get(key);
    this.cat.put(row);
    this.fp.hit("set.after_commit");
    if (prev) this.release(prev);
    this.acc.added(row, kc);
    if (prev && prev.tier !== row.tier) this.changed("removed", prev.tier, key);
    this.changed("stored", row.tier, key);
    this.group.wrote();
  }

  get(key: string): Uint8Array | undefined {
    this.group.begin(); // reads inside the open transaction skip SQLite's per-statement WAL lock (~3 µs)
    const row = this.cat.get(key);
    if (!row) return this.miss(undefined);
    const data = this.media[row.tier]?.read(row.loc, row.size);
    // SSD bytes crossed a medium and are checked; shared memory is not re-verified in process.
    if (!data || (row.tier === "ssd" && crc32(data) !== row.crc)) {
      this.corrupt++;
      this.remove(row);
      this.group.wrote();
      return this.miss(undefined);
    }
    this.counters[row.tier].hits++;
    if (row.tier === "ssd") this.counters.cpu.misses += this.media.cpu ? 1 : 0;
    this.cat.touch(key, this.nowMs());
    if (row.tier === "ssd" && this.media.cpu && this.media.cpu.charge(row.size) + keyCharge(key) <= this.media.cpu.capacityBytes) {
      const got = this.promote(row, data) ?? data;
      this.group.wrote();
      return got;
    }
    return data;
  }

  /** The CRC-32 of a key's bytes as they are now (the peer API's `crc32`): the stored one, or computed
   * over `data` (the caller's copy of them) for a CPU object that never left shared memory. */
  crcOf(key: string, data: Uint8Array): number {
    const c = this.cat.get(key)?.crc;
    return c === undefined || c === CRC_UNKNOWN ? crc32(data) : c;
  }

  /** Commit the open group of catalog changes, then free the locations they released. */
  flush(): void {
    this.group.flush();
  }

  /** Every object's key and tier (from the catalog): index replay at start (tier-key.ts tierIndexReplay). */
  *entries(): Generator<{ key: string; tier: TierName }> {
    for (const row of this.cat.rows()) yield { key: row.key, tier: row.tier };
  }

  has(key: string): boolean {
    return this.cat.get(key) !== undefined;
  }

  delete(key: string): boolean {
    const row = this.cat.get(key);
    if (!row) return false;
    this.group.begin();
    this.remove(row);
    this.group.wrote();
    return true;
  }

  list(limit = Number.MAX_SAFE_INTEGER): string[] {
    return this.cat.keys(limit);
  }

  /** Catalog row of a key (admin, tests). */
  describe(key: string): Row | undefined {
    return this.cat.get(key);
  }

  get catalog(): Catalog {
    return this.cat;
  }

  close(): void {
    this.flush();
    this.cat.close();
    this.media.cpu?.close();
    this.media.ssd?.close();
  }

  private miss<T>(v: T): T {
    if (this.media.cpu) this.counters.cpu.misses++;
    if (this.media.ssd) this.counters.ssd.misses++;
    return v;
  }

  /** CPU when it can ever hold the value, else SSD, else nothing. */
  private placement(size: number, keyBytes: number): Medium | undefined {
    for (const m of [this.media.cpu, this.media.ssd]) {
      if (m && size <= m.maxObjectBytes && m.charge(size) + keyBytes <= m.capacityBytes) return m;
    }
    return undefined;
  }

  /** Evict from `m` until `size` bytes fit under its capacity and `place` finds a location for them. */
  private writeWithRoom(
    m: Medium,
    size: number,
    fp: ((n: FailpointName) => void) | undefined,
    keyBytes: number,
    place: (fp: ((n: FailpointName) => void) | undefined) => string | undefined,
  ): string | undefined {
    const need = m.charge(size) + keyBytes;
    for (let round = 0; ; round++) {
      const used = m.usedBytes + this.acc.keyBytes[m.tier];
      if (used + need <= m.capacityBytes) {
        const loc = place(fp);
        if (loc !== undefined) return loc;
      }
      // Locations released by the open group are free once it commits: commit before evicting more.
      if (this.group.holds(m)) {
        this.group.flush();
        this.group.begin();
        continue;
      }
      // Over capacity, or fragmented (CPU): free the policy's choice of cold objects and retry.
      const shortBy = Math.max(used + need - m.capacityBytes, need);
      const victims = this.policy(this.cat.coldest(m.tier, CANDIDATE_WINDOW), shortBy, this.nowMs());
      if (victims.length === 0) return undefined;
      for (const k of victims) this.evictOne(m.tier, k);
      if (round > 1_000_000) return undefined;
    }
  }

  private evictOne(tier: TierName, key: string): void {
    const row = this.cat.get(key);
    if (!row || row.tier !== tier) return;
    this.acc.counters[tier].evictions++;
    if (tier === "cpu" && this.media.ssd && this.demote(row)) return;
    this.remove(row, true);
  }

  /** CPU → SSD. False when the object cannot go to SSD (too big, unreadable): the caller deletes it. */
  private demote(row: Row): boolean {
    const ssd = this.media.ssd!;
    const data = this.media.cpu!.read(row.loc, row.size);
    const kc = keyCharge(row.key);
    if (!data || ssd.charge(row.size) + kc > ssd.capacityBytes) return false;
    // The bytes leave shared memory here: checksum them now (a CRC known from an earlier SSD read must still match).
    const crc = crc32(data);
    if (row.crc !== CRC_UNKNOWN && crc !== row.crc) return false;
    const loc = this.writeWithRoom(ssd, data.length, undefined, kc, () => ssd.write(data));
    if (loc === undefined) return false;
    this.fp.hit("demote.after_write");
    this.cat.move(row.key, "ssd", loc, ssd.charge(row.size), crc);
    this.fp.hit("demote.after_commit");
    this.group.release(this.media.cpu!, row.loc, row.size);
    this.acc.moved(row, "ssd", ssd.charge(row.size));
    this.changed("removed", "cpu", row.key);
    this.changed("stored", "ssd", row.key);
    return true;
  }

  private promote(row: Row, data: Uint8Array): Uint8Array | undefined {
    const cpu = this.media.cpu!;
    const copy = data; // a private buffer read from the file, untouched by the evictions below
    const kc = keyCharge(row.key);
    const loc = this.writeWithRoom(cpu, copy.length, undefined, kc, () => cpu.write(copy));
    if (loc === undefined) return undefined;
    this.fp.hit("promote.after_copy");
    const now = this.cat.get(row.key);
    if (!now || now.loc !== row.loc) {
      cpu.free(loc, row.size); // the object was evicted while making room: keep it where it went
      return copy;
    }
    this.cat.move(row.key, "cpu", loc, cpu.charge(row.size), row.crc);
    this.fp.hit("promote.after_commit");
    this.group.release(this.media.ssd!, row.loc, row.size);
    this.acc.moved(row, "cpu", cpu.charge(row.size));
    this.changed("removed", "ssd", row.key);
    this.changed("stored", "cpu", row.key);
    return cpu.read(loc, row.size);
  }

  private enforceQuota(model: string, quota: number, need: number, key: string): void {
    const own = this.cat.get(key);
    let used = this.acc.modelBytes(model) - (own && own.model === model ? own.charged : 0);
    while (used + need > quota) {
      const victims = this.cat.coldestOfModel(model, CANDIDATE_WINDOW).filter((r) => r.key !== key);
      if (victims.length === 0) return;
      for (const r of victims) {
        if (used + need <= quota) break;
        this.acc.counters[r.tier].evictions++;
        this.remove(r, true);
        used -= r.charged;
      }
    }
  }

  /** Delete the row, then free its data (crash in between: an orphan, reclaimed on open). */
  private remove(row: Row, eviction = false): void {
    this.cat.delete(row.key);
    if (eviction) this.fp.hit("evict.after_commit");
    this.release(row);
    this.changed("removed", row.tier, row.key);
  }

  private changed(kind: TierChange["kind"], tier: TierName, key: string): void {
    this.opts.onChange?.({ kind, tier, key });
  }

  private release(row: Row): void {
    const m = this.media[row.tier];
    if (m) this.group.release(m, row.loc, row.size);
    this.acc.removed(row);
  }
}
