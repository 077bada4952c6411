// Durable small-file writes for cluster state (votes, incarnation, term files). The sequence is
// tmp + fsync + rename + directory fsync, the crash-safe pattern etcd-io/raft and hashicorp/raft
// rely on for their HardState; all calls are synchronous on purpose, so a vote handler checks,
// persists and answers without an `await` in between (no other handler can interleave).
import { closeSync, fsyncSync, mkdirSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";

let seq = 0;

function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = openSync(dir, "r");
    fsyncSync(fd);
  } catch {
    // some filesystems (and platforms) refuse fsync on a directory; the rename is still atomic
  } finally {
    if (fd !== undefined) closeSync(fd);
  }
}

/** Atomically replace `path` with `data`: readers see the old or the new content, never a mix. */
export function writeDurable(path: string, data: string, opts: { fsync?: boolean } = {}): void {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true });
  const tmp = join(dir, `.${process.pid}.${seq++}.tmp`);
  const fd = openSync(tmp, "w", 0o600);
  try {
    writeSync(fd, data);
    if (opts.fsync !== false) fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, path);
  if (opts.fsync !== false) fsyncDir(dir);
}

/**
 * Create `path` only if it does not exist (O_CREAT|O_EXCL). Returns false when another process got
 * there first. This is the one primitive the file backend's "one leader per term" rests on.
 */
export function createExclusive(path: string, data: string): boolean {
  mkdirSync(dirname(path), { recursive: true });
  let fd: number;
  try {
    fd = openSync(path, "wx", 0o600);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "EEXIST") return false;
    throw e;
  }
  try {
    writeSync(fd, data);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  fsyncDir(dirname(path));
  return true;
}

/** Parse a JSON file, or undefined when it is missing or torn. */
export function readJson<T>(path: string): T | undefined {
  try {
    return JSON.parse(readFileSync(path, "utf8")) as T;
  } catch {
    return undefined;
  }
}
