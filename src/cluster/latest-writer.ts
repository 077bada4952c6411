// Asynchronous durable replacement of one small file, for the file backend's heartbeats (file.ts):
// the synchronous writeDurable (durable.ts) blocks the event loop for as long as the disk takes,
// and a heartbeat every 500 ms on a busy disk showed as ~100 ms stalls of the frontend. Here the
// same tmp + fsync + rename sequence runs on async fs calls, one write in flight per file; a newer
// content arriving while one is in flight replaces the one queued behind it (a heartbeat only ever
// needs its latest state on disk). Each write reports "written" (renamed into place: readers see
// it), "superseded" (never written, a newer one took its place) or "failed".
// The fs calls are a seam (`AsyncDurableFs`) so a test can hold a write and show the loop runs on.
import { mkdir, open, rename, rm } from "node:fs/promises";
import { dirname, join } from "node:path";

/** The async fs calls a durable replace needs. */
export interface AsyncDurableFs {
  mkdir(dir: string): Promise<void>;
  /** Create `path` (mode 0600) holding `data`, fsynced before the promise resolves. */
  writeFileSynced(path: string, data: string): Promise<void>;
  rename(from: string, to: string): Promise<void>;
  /** Remove `path` if it exists (a failed write's temporary file). */
  remove(path: string): Promise<void>;
}

export const nodeAsyncFs: AsyncDurableFs = {
  mkdir: async (dir) => void (await mkdir(dir, { recursive: true })),
  async writeFileSynced(path, data) {
    const fh = await open(path, "w", 0o600);
    try {
      await fh.writeFile(data);
      await fh.sync();
    } finally {
      await fh.close();
    }
  },
  rename: (from, to) => rename(from, to),
  remove: (path) => rm(path, { force: true }),
};

export type WriteResult = "written" | "superseded" | "failed";

interface Pending {
  data: string;
  done: ((r: WriteResult) => void) | undefined;
}

let seq = 0;

export class LatestWriter {
  private inFlight = false;
  private queued: Pending | null = null;
  private idleWaiters: (() => void)[] = [];

  /** `onError` hears every failed write (the caller counts and logs them). */
  constructor(
    readonly path: string,
    private readonly fs: AsyncDurableFs,
    private readonly onError: (e: unknown, path: string) => void,
  ) {}

  /** Replace the file's content with `data` soon; `done` says what became of this content. */
  write(data: string, done?: (r: WriteResult) => void): void {
    const older = this.queued;
    this.queued = { data, done };
    older?.done?.("superseded");
    if (!this.inFlight) void this.pump();
  }

  /** True while a write is in flight or queued. */
  get busy(): boolean {
    return this.inFlight || this.queued !== null;
  }

  /** Resolves when nothing is in flight or queued. */
  idle(): Promise<void> {
    if (!this.busy) return Promise.resolve();
    return new Promise((ok) => this.idleWaiters.push(ok));
  }

  private async pump(): Promise<void> {
    this.inFlight = true;
    while (this.queued !== null) {
      const w = this.queued;
      this.queued = null;
      let r: WriteResult = "written";
      try {
        await this.replace(w.data);
      } catch (e) {
        r = "failed";
        this.onError(e, this.path);
      }
      try {
        w.done?.(r);
      } catch (e) {
        this.onError(e, this.path); // a caller's callback must not stop this file's writes
      }
    }
    this.inFlight = false;
    const waiters = this.idleWaiters;
    this.idleWaiters = [];
    for (const ok of waiters) ok();
  }

  private async replace(data: string): Promise<void> {
    const dir = dirname(this.path);
    // A dot name: the backend's directory listings skip it (file.ts readMembers, latestTerm, prune).
    const tmp = join(dir, `.${process.pid}.a${seq++}.tmp`);
    await this.fs.mkdir(dir);
    try {
      await this.fs.writeFileSynced(tmp, data);
      await this.fs.rename(tmp, this.path);
    } catch (e) {
      await this.fs.remove(tmp).catch(() => {});
      throw e;
    }
  }
}
