// Shared-directory mode: engines write KV files into a directory herd manages — vLLM's offloading
// `fs` secondary tier (<root>/<model>_<hash>_r<rank>/<hex[0:3]>/<hex[3:5]>_g<group>/<hex>.bin, written
// to a temporary name then os.replace'd) and LMCache's fs:// connector (<base>/<key>.data, same
// write-then-replace). Neither bounds its size; herd indexes the files in the catalog (table
// shared_files), and when the total passes the capacity deletes the coldest by the same pure policy.
//
// Eviction never breaks a reader: a file is first renamed into <root>/.herd-evicting/ (atomic, same
// file system: new lookups miss from that instant) and then unlinked. A reader that already opened it
// keeps a valid descriptor and reads the whole file (POSIX unlink semantics); one that opens later
// gets ENOENT, which both engines treat as a miss and recompute. If the file at the path changed
// since the scan (the engine replaced it), the renamed file is put back and the eviction skipped.
// A crash between rename and unlink leaves the file in .herd-evicting/, emptied on the next scan.
//
// Recency: engines' reads are invisible to herd, so a file's last access is max(mtime, atime) from
// the file system (relatime updates atime at most daily; mount with strictatime for finer LRU).

import { existsSync, mkdirSync, readdirSync, renameSync, rmSync, statSync, unlinkSync } from "node:fs";
import { join, relative } from "node:path";
import type { Catalog } from "./catalog.ts";
import { CANDIDATE_WINDOW, POLICIES, type PolicyName } from "./policy.ts";

const TRASH = ".herd-evicting";
const KV_FILE = /\.(bin|data)$/;

export interface SharedDirFigures {
  path: string;
  capacity_bytes: number;
  used_bytes: number;
  objects: number;
  evictions: number;
  evicted_bytes: number;
}

export class SharedDir {
  evictions = 0;
  evictedBytes = 0;
  private used = 0;
  private objects = 0;
  private seq = 0;
  private readonly policy;

  constructor(
    private readonly cat: Catalog,
    readonly path: string,
    readonly capacityBytes: number,
    policy: PolicyName = "lru",
  ) {
    this.policy = POLICIES[policy];
    mkdirSync(path, { recursive: true });
    cat.db.exec(
      `CREATE TABLE IF NOT EXISTS shared_files (dir TEXT NOT NULL, path TEXT NOT NULL, size INTEGER NOT NULL,
         mtime_ms REAL NOT NULL, ino INTEGER NOT NULL, access_ms REAL NOT NULL, PRIMARY KEY (dir, path)) WITHOUT ROWID;
       CREATE INDEX IF NOT EXISTS shared_cold ON shared_files (dir, access_ms);`,
    );
  }

  /** Re-index the directory from the file system, then evict down to capacity. */
  sync(): void {
    this.emptyTrash();
    const seen = new Map<string, { size: number; mtime: number; ino: number; access: number }>();
    this.walk(this.path, seen);
    const upsert = this.cat.db.prepare(
      "INSERT OR REPLACE INTO shared_files (dir, path, size, mtime_ms, ino, access_ms) VALUES (?, ?, ?, ?, ?, ?)",
    );
    const known = this.cat.db.prepare<{ path: string }, [string]>("SELECT path FROM shared_files WHERE dir = ?").all(this.path);
    const del = this.cat.db.prepare("DELETE FROM shared_files WHERE dir = ? AND path = ?");
    this.cat.tx(() => {
      for (const { path } of known) if (!seen.has(path)) del.run(this.path, path);
      for (const [p, f] of seen) upsert.run(this.path, p, f.size, f.mtime, f.ino, f.access);
    });
    this.used = 0;
    for (const f of seen.values()) this.used += f.size;
    this.objects = seen.size;
    this.enforce();
  }

  figures(): SharedDirFigures {
    return {
      path: this.path,
      capacity_bytes: this.capacityBytes,
      used_bytes: this.used,
      objects: this.objects,
      evictions: this.evictions,
      evicted_bytes: this.evictedBytes,
    };
  }

  private enforce(): void {
    const cold = this.cat.db.prepare<{ path: string; size: number; mtime_ms: number; ino: number; access_ms: number }, [string, number]>(
      "SELECT path, size, mtime_ms, ino, access_ms FROM shared_files WHERE dir = ? ORDER BY access_ms LIMIT ?",
    );
    const del = this.cat.db.prepare("DELETE FROM shared_files WHERE dir = ? AND path = ?");
    while (this.used > this.capacityBytes) {
      const rows = cold.all(this.path, CANDIDATE_WINDOW);
      if (rows.length === 0) return;
      const byPath = new Map(rows.map((r) => [r.path, r]));
      const victims = this.policy(
        rows.map((r) => ({ key: r.path, bytes: r.size, createdMs: r.mtime_ms, accessMs: r.access_ms, hits: 0 })),
        this.used - this.capacityBytes,
        Math.max(...rows.map((r) => r.access_ms)) + 1,
      );
      for (const v of victims) {
        const r = byPath.get(v)!;
        if (this.evictFile(r.path, r.ino)) {
          this.evictions++;
          this.evictedBytes += r.size;
        }
        del.run(this.path, r.path);
        this.used -= r.size;
        this.objects--;
      }
    }
  }

  /** Rename out of the way, check it is the file indexed, unlink. False when it was already gone. */
  private evictFile(rel: string, ino: number): boolean {
    const trash = join(this.path, TRASH);
    mkdirSync(trash, { recursive: true });
    const from = join(this.path, rel);
    const to = join(trash, `${this.seq++}-${rel.replaceAll("/", "_")}`);
    try {
      renameSync(from, to);
    } catch {
      return false;
    }
    if (statSync(to).ino !== ino && !existsSync(from)) {
      renameSync(to, from); // the engine rewrote it after the scan: keep the fresh copy
      return false;
    }
    unlinkSync(to);
    return true;
  }

  private emptyTrash(): void {
    const trash = join(this.path, TRASH);
    if (existsSync(trash)) rmSync(trash, { recursive: true, force: true });
  }

  private walk(dir: string, out: Map<string, { size: number; mtime: number; ino: number; access: number }>): void {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.name === TRASH) continue;
      const p = join(dir, e.name);
      if (e.isDirectory()) this.walk(p, out);
      else if (e.isFile() && KV_FILE.test(e.name)) {
        try {
          const st = statSync(p);
          out.set(relative(this.path, p), { size: st.size, mtime: st.mtimeMs, ino: st.ino, access: Math.max(st.mtimeMs, st.atimeMs) });
        } catch {
          // Replaced or deleted while scanning: the next scan sees its successor.
        }
      }
    }
  }
}
