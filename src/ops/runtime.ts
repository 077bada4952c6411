// The runtime file: node.data_dir/run/herd.json, written by a running daemon
// (src/daemon/runtime-file.ts) and read here, so `herd status|drain|undrain|logs` find the daemon at
// the address `herd run --listen` (or the config) actually used, and a second herd can name the one
// that already owns a data dir. It lives beside engines.json (src/engine/orphans.ts) and identifies
// its writer the same way: pid + start time (/proc/<pid>/stat) + boot id, so a stale file left by a
// killed herd, or a pid reused by another process, is never taken for a live herd.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { bootId, readStat } from "../engine/procfs.ts";

export const RUNTIME_FILE_VERSION = 1;

export interface RuntimeInfo {
  version: number;
  pid: number;
  startTicks: number;
  bootId: string;
  /** frontend.listen as configured (after --listen). */
  listen: string;
  /** The URL the listener is reachable at (port 0 resolved); null while starting. */
  url: string | null;
  /** The config file, or null for the embedded default. */
  config: string | null;
  /** How herd was started: the binary, or "source checkout DIR". */
  program: string;
  started_at: string;
  data_dir: string;
}

export function runtimeFilePath(dataDir: string): string {
  return join(dataDir, "run", "herd.json");
}

/** Parse a runtime file's text; null when it is not one (foreign, truncated, older format). */
export function parseRuntimeInfo(text: string): RuntimeInfo | null {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    return null;
  }
  const r = v as RuntimeInfo;
  if (typeof r !== "object" || r === null || r.version !== RUNTIME_FILE_VERSION) return null;
  if (!Number.isInteger(r.pid) || r.pid < 1 || typeof r.startTicks !== "number" || typeof r.listen !== "string") return null;
  if (r.url !== null && typeof r.url !== "string") return null;
  return r;
}

/** The runtime file of a data dir, or null when absent or unreadable. */
export function readRuntimeFile(dataDir: string): RuntimeInfo | null {
  try {
    return parseRuntimeInfo(readFileSync(runtimeFilePath(dataDir), "utf8"));
  } catch {
    return null;
  }
}

/** True when the process that wrote `info` is still running (same pid, start time and boot). */
export function isLive(info: Pick<RuntimeInfo, "pid" | "startTicks" | "bootId">): boolean {
  if (info.bootId && info.bootId !== bootId()) return false;
  const st = readStat(info.pid);
  return st !== null && st.state !== "Z" && st.startTicks === info.startTicks;
}

/** The live herd recorded in a data dir, or null. */
export function liveRuntime(dataDir: string): RuntimeInfo | null {
  const info = readRuntimeFile(dataDir);
  return info && isLive(info) ? info : null;
}

/** One line naming a running herd, for messages: "pid 12 listening on http://…, config F, started by P at T". */
export function describeRuntime(info: RuntimeInfo): string {
  return [
    `pid ${info.pid}`,
    `listening on ${info.url ?? info.listen}`,
    `config ${info.config ?? "(embedded default)"}`,
    `started by ${info.program} at ${info.started_at}`,
  ].join(", ");
}
