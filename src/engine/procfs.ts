// Linux /proc readers: a process's identity (start time, command line), its group, and whether it
// is still running. Used to find engines a previous herd left behind. Everything returns null or
// an empty list instead of throwing: a process can vanish between two reads.
import { readdirSync, readFileSync } from "node:fs";

export interface ProcStat {
  pid: number;
  /** R, S, D, T (stopped), Z (zombie), … */
  state: string;
  ppid: number;
  pgrp: number;
  session: number;
  /** Clock ticks after boot when the process started: with the pid, a unique identity per boot. */
  startTicks: number;
}

/** Parse /proc/<pid>/stat. The command name may contain spaces and parentheses: split after the last ')'. */
export function parseStat(text: string): ProcStat | null {
  const close = text.lastIndexOf(")");
  const pid = Number.parseInt(text, 10);
  if (close < 0 || !Number.isFinite(pid)) return null;
  const f = text.slice(close + 2).trim().split(/\s+/);
  // After the name: state(3) ppid(4) pgrp(5) session(6) … starttime(22) → indexes 0,1,2,3 … 19.
  if (f.length < 20) return null;
  return {
    pid,
    state: f[0]!,
    ppid: Number(f[1]),
    pgrp: Number(f[2]),
    session: Number(f[3]),
    startTicks: Number(f[19]),
  };
}

export function readStat(pid: number): ProcStat | null {
  try {
    return parseStat(readFileSync(`/proc/${pid}/stat`, "utf8"));
  } catch {
    return null;
  }
}

/** The argv a process runs with (as it shows in /proc; NUL-separated there). */
export function readCmdline(pid: number): string[] | null {
  try {
    const raw = readFileSync(`/proc/${pid}/cmdline`, "utf8");
    if (raw.length === 0) return null;
    return raw.replace(/\0$/, "").split("\0");
  } catch {
    return null;
  }
}

/** Running means present and not a zombie (a reaped-later corpse holds no GPU memory). */
export function isRunning(pid: number): boolean {
  const st = readStat(pid);
  return st !== null && st.state !== "Z" && st.state !== "X";
}

export function bootId(): string {
  try {
    return readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim();
  } catch {
    return "";
  }
}

/** Live (non-zombie) processes whose process group is `pgid`. */
export function groupMembers(pgid: number): ProcStat[] {
  let names: string[];
  try {
    names = readdirSync("/proc");
  } catch {
    return [];
  }
  const out: ProcStat[] = [];
  for (const n of names) {
    if (!/^\d+$/.test(n)) continue;
    const st = readStat(Number(n));
    if (st && st.pgrp === pgid && st.state !== "Z" && st.state !== "X") out.push(st);
  }
  return out;
}
