// No orphaned GPU processes: every engine herd starts is recorded in data_dir/run/engines.json
// (pid, process group, start time, command line). If herd dies without stopping them (SIGKILL,
// OOM kill, power to the daemon only), the next start finds the survivors and terminates them
// before starting new engines — otherwise they would keep their GPU memory and ports forever —
// unless the new plan has the very same engine (same worker, port and command line) and it still
// answers its health check: then it is adopted (recover.ts), sparing minutes of model loading.
import type { Clock } from "../core/clock.ts";
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type { Logger } from "../core/log.ts";
import { bootId, groupMembers, isRunning, readCmdline, readStat } from "./procfs.ts";
import type { ProcStat } from "./procfs.ts";

export interface EngineRecord {
  worker: string;
  pid: number;
  /** Engines run in their own session, so the group id equals the pid. */
  pgid: number;
  /** From /proc/<pid>/stat: with bootId, tells our engine from a later process reusing the pid. */
  startTicks: number;
  bootId: string;
  cmdline: string[];
  startedAt: string;
  /** The planned HTTP port and launchHash(spec) (drivers/common.ts); absent in records of older herds. */
  port?: number;
  argvHash?: string;
  /** Every port the engine binds (HTTP, KV events), so a new plan can give them to it again. */
  ports?: number[];
}

/** The herd process that wrote the record (to refuse sharing a data_dir with a live herd). */
export interface OwnerRecord {
  pid: number;
  startTicks: number;
  bootId: string;
}

/** The on-disk list of running engines, rewritten atomically (write + rename) on every change. */
export class EngineRecordFile {
  constructor(readonly path: string) {}

  private read(): { herd?: unknown; engines?: unknown } {
    try {
      const parsed: unknown = JSON.parse(readFileSync(this.path, "utf8"));
      return typeof parsed === "object" && parsed !== null ? parsed : {};
    } catch {
      return {};
    }
  }

  load(): EngineRecord[] {
    const list = this.read().engines;
    return Array.isArray(list) ? list.filter(isRecord) : [];
  }

  owner(): OwnerRecord | null {
    const h = this.read().herd as OwnerRecord | undefined;
    return h && Number.isInteger(h.pid) && typeof h.startTicks === "number" ? h : null;
  }

  save(records: EngineRecord[]): void {
    mkdirSync(dirname(this.path), { recursive: true });
    const tmp = `${this.path}.${process.pid}.tmp`;
    const herd: OwnerRecord = { pid: process.pid, startTicks: readStat(process.pid)?.startTicks ?? -1, bootId: bootId() };
    writeFileSync(tmp, JSON.stringify({ herd, engines: records }, null, 2) + "\n");
    renameSync(tmp, this.path);
  }
}

/** True when the herd that wrote the record is another process that is still running. */
export function ownerIsAnotherLiveHerd(owner: OwnerRecord | null): boolean {
  if (!owner || owner.pid === process.pid || owner.bootId !== bootId()) return false;
  const st = readStat(owner.pid);
  return st !== null && st.state !== "Z" && st.startTicks === owner.startTicks;
}

function isRecord(x: unknown): x is EngineRecord {
  const r = x as EngineRecord;
  return typeof r === "object" && r !== null && Number.isInteger(r.pid) && r.pid > 1 && Number.isInteger(r.pgid) && r.pgid > 1 &&
    typeof r.startTicks === "number" && Array.isArray(r.cmdline);
}

/** Identity of a freshly spawned engine, read from /proc right after spawn. */
export function recordFor(worker: string, pid: number, nowIso: string, launch?: { port: number; argvHash: string; ports: number[] }): EngineRecord {
  const st = readStat(pid);
  return {
    ...(launch ?? {}),
    worker,
    pid,
    pgid: st?.pgrp ?? pid,
    startTicks: st?.startTicks ?? -1,
    bootId: bootId(),
    cmdline: readCmdline(pid) ?? [],
    startedAt: nowIso,
  };
}

const sameArgv = (a: string[], b: string[]) => a.length === b.length && a.every((x, i) => x === b[i]);

/**
 * The processes still running from a record: the engine itself when its pid still names the same
 * process (start time or command line match), plus whatever it started in its group. If the
 * engine itself is gone, its children still count when they are in its session and started
 * after it. A pid now used by an unrelated process yields nothing.
 */
export function leftoversOf(rec: EngineRecord): ProcStat[] {
  if (rec.bootId && rec.bootId !== bootId()) return [];
  const leader = readStat(rec.pid);
  const leaderAlive = leader !== null && leader.state !== "Z";
  if (leaderAlive) {
    const cmd = readCmdline(rec.pid) ?? [];
    const same = leader.startTicks === rec.startTicks || (rec.cmdline.length > 0 && sameArgv(cmd, rec.cmdline));
    if (!same) return [];
    return [leader, ...groupMembers(rec.pgid).filter((m) => m.pid !== rec.pid)];
  }
  return groupMembers(rec.pgid).filter((m) => m.session === rec.pgid && m.startTicks >= rec.startTicks);
}

function signalGroup(pgid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pgid, sig);
  } catch {
    // Already gone.
  }
}

/**
 * Terminate what previous herds left running: SIGTERM each leftover group, wait up to
 * stopTimeoutMs, then SIGKILL. Returns the records that had live processes.
 */
export async function reapLeftovers(
  records: EngineRecord[],
  opts: { stopTimeoutMs: number; logger: Logger; clock: Clock },
): Promise<EngineRecord[]> {
  const found: { rec: EngineRecord; procs: ProcStat[] }[] = [];
  for (const rec of records) {
    const procs = leftoversOf(rec);
    if (procs.length === 0) continue;
    found.push({ rec, procs });
    opts.logger.warn("found an engine left running by a previous herd; terminating it", {
      worker: rec.worker,
      pid: rec.pid,
      pgid: rec.pgid,
      processes: procs.length,
      started_at: rec.startedAt,
      cmdline: rec.cmdline.join(" "),
    });
    signalGroup(rec.pgid, "SIGTERM");
  }
  const alive = () => found.some((f) => f.procs.some((p) => isRunning(p.pid) && readStat(p.pid)?.startTicks === p.startTicks));
  const { clock } = opts;
  const deadline = clock.now() + opts.stopTimeoutMs;
  while (alive() && clock.now() < deadline) await clock.sleep(50);
  if (alive()) {
    for (const f of found) {
      opts.logger.warn("leftover engine ignored SIGTERM; sending SIGKILL", { worker: f.rec.worker, pgid: f.rec.pgid });
      signalGroup(f.rec.pgid, "SIGKILL");
    }
    const killDeadline = clock.now() + 2_000;
    while (alive() && clock.now() < killDeadline) await clock.sleep(20);
    if (alive()) opts.logger.error("leftover engine processes survived SIGKILL (uninterruptible?)", {});
  }
  return found.map((f) => f.rec);
}
