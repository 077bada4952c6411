// Group commit of the tier's catalog changes (tier.ts; README "Invariants"): changes go into one open
// SQLite transaction, committed after GROUP_COMMIT_ROWS changes, GROUP_COMMIT_MS after the first (the
// injected clock's timer), when the tier needs the space held by frees waiting for it, with
// GROUP_COMMIT_FREED_BYTES of them pending, and at close. A commit per row cost ~30–240 µs, one to
// several copies of 1 MiB (docs/benchmarks.md, issue 25).
// A location released while the group is open: shared memory is freed at once (a stale row can never
// adopt it again: shm-medium.ts unstamps it on free); an SSD file only after the commit, so the
// committed catalog never names a file that was deleted or reused.

import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Catalog } from "./catalog.ts";
import type { Medium } from "./medium.ts";

export const GROUP_COMMIT_ROWS = 64;
export const GROUP_COMMIT_MS = 10;
/** Bytes of released SSD locations a group may hold (they stay allocated until its commit). */
export const GROUP_COMMIT_FREED_BYTES = 2 * 1024 * 1024;

export class GroupCommit {
  private uncommitted = 0;
  private timer: TimerHandle | undefined;
  private deferred: { m: Medium; loc: string; size: number }[] = [];
  private deferredBytes = 0;

  constructor(
    private readonly cat: Catalog,
    private readonly clock: Clock,
  ) {}

  /** Open the group if none is (reads inside it skip SQLite's per-statement WAL lock, ~3 µs). */
  begin(): void {
    if (this.cat.inTransaction) return;
    this.cat.begin();
    this.timer = this.clock.setTimer(GROUP_COMMIT_MS, () => this.flush());
  }

  /** One change went into the group. */
  wrote(): void {
    if (++this.uncommitted >= GROUP_COMMIT_ROWS || this.deferredBytes >= GROUP_COMMIT_FREED_BYTES) this.flush();
  }

  /** Commit the open group, then free the locations it released. */
  flush(): void {
    this.timer?.cancel();
    this.timer = undefined;
    this.cat.commit();
    this.uncommitted = 0;
    const d = this.deferred;
    this.deferred = [];
    this.deferredBytes = 0;
    for (const x of d) x.m.free(x.loc, x.size);
  }

  /** Free `loc` at once when that is safe (no open group, or a medium that unstamps), else after the commit. */
  release(m: Medium, loc: string, size: number): void {
    if (m.freesAtOnce || !this.cat.inTransaction) return m.free(loc, size);
    this.deferred.push({ m, loc, size });
    this.deferredBytes += size;
  }

  /** Whether a commit would free space on `m`. */
  holds(m: Medium): boolean {
    return this.deferred.some((x) => x.m === m);
  }
}
