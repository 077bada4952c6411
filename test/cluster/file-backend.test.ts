// The file backend's asynchronous heartbeats (src/cluster/file.ts, latest-writer.ts) on a virtual
// clock, with an injected fs that holds writes until the test lets them land: a held write (a disk
// that does not answer) must not stop the heartbeat loop, a newer state replaces a queued one, the
// lease counts only completed writes, and failures are counted and logged at most every 30 s.
// No timing is measured: what runs while a write is held is what shows the loop is not blocked.
import { afterEach, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { VirtualClock } from "../../src/core/clock.ts";
import { FileBackend } from "../../src/cluster/file.ts";
import { type AsyncDurableFs, LatestWriter, type WriteResult } from "../../src/cluster/latest-writer.ts";
import { tempDir } from "./harness/cluster.ts";
import { memoryLogger } from "../helpers/log.ts";

/** Writes land when `release()` is called (or at once with `hold = false`); `fail` makes them reject. */
class HeldFs implements AsyncDurableFs {
  hold = true;
  fail: Error | null = null;
  readonly started: string[] = [];
  private held: (() => void)[] = [];

  async mkdir(dir: string): Promise<void> {
    mkdirSync(dir, { recursive: true });
  }
  writeFileSynced(path: string, data: string): Promise<void> {
    this.started.push(path);
    if (this.fail) return Promise.reject(this.fail);
    if (!this.hold) return Promise.resolve(writeFileSync(path, data));
    return new Promise((ok) => this.held.push(() => ok(writeFileSync(path, data))));
  }
  async rename(from: string, to: string): Promise<void> {
    renameSync(from, to);
  }
  async remove(path: string): Promise<void> {
    rmSync(path, { force: true });
  }
  get waiting(): number {
    return this.held.length;
  }
  /** Let every held write land, then the continuations they start (every step here is a microtask). */
  async release(): Promise<void> {
    while (this.held.length > 0) {
      for (const ok of this.held.splice(0)) ok();
      await settle();
    }
  }
}

const settle = () => new Promise<void>((ok) => setImmediate(ok));
const TIMING = { heartbeat_ms: 500, dead_after_ms: 3000 };
const dirs: string[] = [];

function backend(fs: HeldFs, clock: VirtualClock, log = memoryLogger()) {
  const dir = tempDir("file-backend");
  dirs.push(dir);
  const b = new FileBackend({ dir, clock, log, incarnation: 1, timing: TIMING, fs });
  return { b, dir, log };
}

/** Advance the clock one heartbeat at a time, letting promise continuations run in between. */
async function beats(clock: VirtualClock, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    clock.advance(TIMING.heartbeat_ms);
    await settle();
  }
}

afterEach(() => {
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

describe("LatestWriter", () => {
  test("one write in flight; a newer content replaces the queued one, which reports superseded", async () => {
    const fs = new HeldFs();
    const dir = tempDir("latest-writer");
    dirs.push(dir);
    const path = join(dir, "x.json");
    const results: Record<string, WriteResult> = {};
    const w = new LatestWriter(path, fs, () => {});
    for (const v of ["a", "b", "c", "d"]) w.write(v, (r) => void (results[v] = r));
    await settle();
    expect(fs.started.length).toBe(1); // "a" in flight, "d" queued, "b" and "c" replaced
    expect(results).toEqual({ b: "superseded", c: "superseded" });
    await fs.release();
    expect(results).toEqual({ a: "written", b: "superseded", c: "superseded", d: "written" });
    expect(fs.started.length).toBe(2);
    expect(readFileSync(path, "utf8")).toBe("d");
    expect(w.busy).toBe(false);
  });
});

describe("file backend heartbeats on a held disk", () => {
  test("the loop runs on while a heartbeat write is held, and the latest beat is what lands", async () => {
    const fs = new HeldFs();
    const clock = new VirtualClock();
    const { b, dir } = backend(fs, clock);
    await b.start({ name: "a", address: "127.0.0.1:1", meta: {} });
    expect(fs.waiting).toBe(1); // the first heartbeat is held
    // Another node appears while our write is still held: the next ticks must still read the directory.
    writeFileSync(join(dir, "nodes", "b.json"), JSON.stringify({ name: "b", address: "127.0.0.1:2", meta: {}, incarnation: 1, beat: 1 }));
    await beats(clock, 4);
    expect(b.members().map((m) => m.name).sort()).toEqual(["a", "b"]);
    expect(fs.started.filter((p) => p.includes("nodes")).length).toBe(1); // one in flight, the rest queued as one
    await fs.release();
    const rec = JSON.parse(readFileSync(join(dir, "nodes", "a.json"), "utf8"));
    expect(rec.beat).toBe(5); // the newest state, not the second
    fs.hold = false;
    await b.close();
    expect(existsSync(join(dir, "nodes", "a.json"))).toBe(false);
  });

  test("a lease counts only completed beats: held writes end it, landed writes keep it", async () => {
    const fs = new HeldFs();
    const clock = new VirtualClock();
    const { b, log } = backend(fs, clock);
    await b.start({ name: "a", address: "127.0.0.1:1", meta: {} });
    b.campaign();
    expect(b.leader()).toEqual({ leader: "a", term: 1, self: true }); // the term file is a completed write
    await beats(clock, 4); // t = 2000: the term file still backs the lease (2500 ms)
    expect(b.leader().self).toBe(true);
    await beats(clock, 2); // t = 3000: no beat has landed
    expect(b.leader()).toEqual({ leader: null, term: 1, self: false });
    expect(log.lines.some((l) => l.includes("stepping down") && l.includes("no lease beat written"))).toBe(true);
    await fs.release(); // late beats of term 1 back nothing
    expect(b.leader().self).toBe(false);
    // With a disk that answers, the node takes a new term and keeps it: completed beats renew it.
    fs.hold = false;
    await beats(clock, 1);
    const v = b.leader();
    expect(v.self).toBe(true);
    expect(v.term).toBe(2);
    await beats(clock, 20);
    expect(b.leader()).toEqual({ leader: "a", term: 2, self: true });
    await b.close();
  });

  test("failed writes are counted, logged at most once per 30 s, and a failed lease beat steps down", async () => {
    const fs = new HeldFs();
    fs.fail = new Error("EIO: disk says no");
    const clock = new VirtualClock();
    const { b, log } = backend(fs, clock);
    await b.start({ name: "a", address: "127.0.0.1:1", meta: {} });
    b.campaign();
    await settle();
    expect(b.leader().self).toBe(false); // its first beat failed
    expect(log.lines.some((l) => l.includes("cannot write the lease beat"))).toBe(true);
    await beats(clock, 20); // 10 s of failing heartbeats
    const failing = () => log.lines.filter((l) => l.includes("heartbeat writes failing")).length;
    expect(b.writeErrors).toBeGreaterThanOrEqual(21);
    expect(failing()).toBe(1);
    await beats(clock, 41); // past 30 s since the first line
    expect(failing()).toBe(2);
    fs.fail = null;
    fs.hold = false;
    await b.close();
  });
});
