// The running daemon's runtime file (node.data_dir/run/herd.json; format and reader in
// src/ops/runtime.ts). Claimed first thing in startDaemon, before anything binds or spawns:
//  - another live herd already recorded there → refuse, naming it (pid, address, config, program):
//    two herds sharing a data dir would share engines.json and sweep each other's engines;
//  - otherwise write our own record (listen address, pid, config) and, once the listener is up,
//    the URL it is reachable at; `herd status|drain|undrain|logs` read it to find this daemon.
// The file is removed at a clean stop; a stale one (herd killed) is told apart by pid + start time.
import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type { Config } from "../config/types.ts";
import { bootId, readStat } from "../engine/procfs.ts";
import { RUNTIME_FILE_VERSION, describeRuntime, isLive, parseRuntimeInfo, readRuntimeFile, runtimeFilePath, type RuntimeInfo } from "../ops/runtime.ts";
import { sourceCheckoutRoot } from "../config/host.ts";

export interface RuntimeFile {
  readonly path: string;
  /** Record the URL the listener got (port 0 resolved). */
  listening(url: string): void;
  /** Remove the file if it is still ours. */
  release(): void;
}

/** How this herd was started, for the other instance's message: the binary or the checkout. */
export function programName(): string {
  const root = sourceCheckoutRoot();
  return root ? `source checkout ${root}` : process.execPath;
}

/**
 * Refuse when another live herd owns `config.node.data_dir`; otherwise write this process's record.
 * Throws an Error whose message names the other instance and how to separate the two.
 */
export function claimRuntimeFile(config: Config, configPath: string | null, nowIso: string): RuntimeFile {
  const dataDir = config.node.data_dir;
  const path = runtimeFilePath(dataDir);
  const other = readRuntimeFile(dataDir);
  if (other && other.pid !== process.pid && isLive(other)) {
    throw new Error(
      `node.data_dir ${dataDir} belongs to another herd (${describeRuntime(other)}); ` +
        "two herds must not share a data dir (engines.json, the orphan sweep, logs): stop that one, " +
        "or give this one its own node.data_dir in its config",
    );
  }
  const info: RuntimeInfo = {
    version: RUNTIME_FILE_VERSION,
    pid: process.pid,
    startTicks: readStat(process.pid)?.startTicks ?? -1,
    bootId: bootId(),
    listen: config.frontend.listen,
    url: null,
    config: configPath,
    program: programName(),
    started_at: nowIso,
    data_dir: dataDir,
  };
  const write = () => {
    mkdirSync(dirname(path), { recursive: true });
    const tmp = `${path}.${process.pid}.tmp`;
    writeFileSync(tmp, JSON.stringify(info, null, 2) + "\n");
    renameSync(tmp, path);
  };
  write();
  return {
    path,
    listening(url) {
      info.url = url;
      write();
    },
    release() {
      try {
        const now = parseRuntimeInfo(readFileSync(path, "utf8"));
        if (now && now.pid === process.pid && now.started_at === info.started_at) rmSync(path, { force: true });
      } catch {
        // Already gone.
      }
    },
  };
}
