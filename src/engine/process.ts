// One engine process: spawned in its own session (so the whole tree — vLLM starts engine-core and
// worker children — can be signalled as a group), output copied to the log file and the in-memory
// tail, exit reported once the last output has been read.
import { createWriteStream, mkdirSync } from "node:fs";
import type { WriteStream } from "node:fs";
import { dirname, join } from "node:path";
import type { Clock } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { LogTail } from "./logtail.ts";
import { groupMembers, readStat } from "./procfs.ts";
import type { LaunchSpec } from "./types.ts";

/** After the engine exits, wait this long at most for its last output before reporting the exit. */
const OUTPUT_GRACE_MS = 200;

export function logPath(dataDir: string, workerId: string): string {
  return join(dataDir, "logs", `${workerId.replaceAll("/", "_")}.log`);
}

/** Append-only log file of one worker, kept open across that worker's restarts. */
export class LogFile {
  private stream: WriteStream | null = null;
  constructor(readonly path: string) {}

  write(data: string | Uint8Array): void {
    if (!this.stream) {
      mkdirSync(dirname(this.path), { recursive: true });
      this.stream = createWriteStream(this.path, { flags: "a" });
      this.stream.on("error", () => undefined); // a full disk must not crash the daemon
    }
    this.stream.write(data);
  }

  close(): Promise<void> {
    const s = this.stream;
    this.stream = null;
    return s ? new Promise((r) => s.end(r)) : Promise.resolve();
  }
}

export interface ExitInfo {
  code: number | null;
  signal: string | null;
}

export interface EngineProcess {
  pid: number;
  /** Signal the engine's whole process group. */
  signal(sig: "SIGTERM" | "SIGKILL"): void;
}

export function signalGroup(pgid: number, sig: NodeJS.Signals): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch {
    return false;
  }
}

async function pump(stream: ReadableStream<Uint8Array>, name: string, tail: LogTail, file: LogFile): Promise<void> {
  const decoder = new TextDecoder();
  try {
    for await (const chunk of stream) {
      file.write(chunk);
      tail.push(name, decoder.decode(chunk, { stream: true }));
    }
  } catch {
    // The pipe broke; the exit path reports what happened.
  }
}

export function spawnEngine(
  spec: LaunchSpec,
  io: { tail: LogTail; file: LogFile; onExit: (info: ExitInfo) => void },
): EngineProcess {
  const proc = Bun.spawn(spec.argv, {
    env: { ...process.env, ...spec.env },
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
    detached: true,
  });
  const pid = proc.pid;
  const header = `herd: started ${spec.id} pid ${pid} at ${new Date().toISOString()}: ${spec.argv.join(" ")}`;
  io.file.write(`\n=== ${header}\n`);
  io.tail.line(`[${header}]`);
  const readers = Promise.all([pump(proc.stdout, "stdout", io.tail, io.file), pump(proc.stderr, "stderr", io.tail, io.file)]);

  void proc.exited
    .then(async (code) => {
      const sig = proc.signalCode;
      const info: ExitInfo = { code: sig ? null : code, signal: sig ? String(sig) : null };
      // Children of a crashed engine (vLLM's engine core, TP workers) would keep GPU memory; the
      // group is ours (same session id) until its last member exits.
      if (groupMembers(pid).some((m) => m.session === pid)) signalGroup(pid, "SIGKILL");
      await Promise.race([readers, Bun.sleep(OUTPUT_GRACE_MS)]);
      io.tail.flush();
      const how = info.signal ? `signal ${info.signal}` : `code ${info.code}`;
      io.file.write(`=== herd: ${spec.id} pid ${pid} exited with ${how} at ${new Date().toISOString()}\n`);
      io.tail.line(`[herd: pid ${pid} exited with ${how}]`);
      io.onExit(info);
    })
    .catch((e) => io.onExit({ code: null, signal: `wait failed: ${errorMessage(e)}` }));

  return {
    pid,
    signal(sig) {
      if (!signalGroup(pid, sig)) {
        // The group is gone already or was never formed; fall back to the process itself.
        try {
          proc.kill(sig);
        } catch {
          // Exited.
        }
      }
    },
  };
}

/** How often an adopted engine (not our child: no exit notification) is checked for life. */
const ADOPTED_POLL_MS = 500;

/**
 * Take over an engine a previous herd started (recover.ts). It is not our child, so its exit is
 * noticed by polling /proc (same pid, same start time), and its output went to the previous herd's
 * pipes: only what it logged before is in the log file.
 */
export function attachEngine(
  rec: { pid: number; pgid: number; startTicks: number; worker: string },
  clock: Clock,
  io: { tail: LogTail; file: LogFile; onExit: (info: ExitInfo) => void },
): EngineProcess & { detach(): void } {
  const { pid, pgid } = rec;
  const header = `herd: adopted ${rec.worker} pid ${pid} from a previous herd (its output is not captured)`;
  io.file.write(`\n=== ${header}\n`);
  io.tail.line(`[${header}]`);
  let timer = clock.setTimer(ADOPTED_POLL_MS, check);
  let done = false;
  function check(): void {
    const st = readStat(pid);
    if (st !== null && st.state !== "Z" && st.startTicks === rec.startTicks) {
      timer = clock.setTimer(ADOPTED_POLL_MS, check);
      return;
    }
    done = true;
    if (groupMembers(pgid).some((m) => m.session === pgid)) signalGroup(pgid, "SIGKILL");
    io.tail.line(`[herd: adopted pid ${pid} exited]`);
    io.onExit({ code: null, signal: null });
  }
  return {
    pid,
    signal(sig) {
      if (!done) signalGroup(pgid, sig);
    },
    detach() {
      done = true;
      timer.cancel();
    },
  };
}
