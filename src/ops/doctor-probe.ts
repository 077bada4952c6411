// What `herd doctor` asks the host, behind one small interface so every check is a function over
// injected answers (tests pass fake `nvidia-smi`, `vllm` … scripts on PATH, or a fake probe).
// systemProbe is the real one: processes, files, sockets, HTTP.
import { accessSync, constants, readdirSync, readFileSync, statSync } from "node:fs";
import { delimiter, join } from "node:path";
import { wallClockMs } from "../core/clock.ts";
import { canListen } from "../engine/plan.ts";
import { defaultLeaseDir, leaseHolderAt } from "../engine/port-leases.ts";
import type { GpuProbe } from "../engine/gpus.ts";
import { hostFacts, type SizingFacts, type SizingRequest } from "../tier/sizing.ts";

export interface RunResult {
  code: number | null;
  out: string;
  err: string;
}

export interface FileStat {
  mode: number;
  isDir: boolean;
  size: number;
}

export interface HttpAnswer {
  status: number;
  text: string;
  /** The answer's Date header in ms since the epoch, or null. */
  dateMs: number | null;
  /** Wall-clock ms when the request was sent and the answer's headers came (for the clock offset). */
  sentMs: number;
  receivedMs: number;
}

export interface DoctorProbe {
  /** Run argv (argv[0] looked up on PATH); null when the executable is not found. */
  run(argv: readonly string[], timeoutMs: number): Promise<RunResult | null>;
  /** The absolute path argv[0] resolves to on PATH (or itself when it contains a slash and is executable), or null. */
  which(cmd: string): string | null;
  stat(path: string): FileStat | null;
  readText(path: string): string | null;
  /** An HTTP call; throws on a connection error or a timeout. */
  http(url: string, init: { method?: string; headers?: Record<string, string>; body?: string; timeoutMs: number }): Promise<HttpAnswer>;
  /** Whether host:port can be bound now. */
  portFree(host: string, port: number): boolean;
  /** pid of another live herd on this host leasing port (src/engine/port-leases.ts), or null. */
  portLeasedBy(port: number): number | null;
  /** Free space at the tier paths and the memory limit (tier/sizing.ts). */
  tierFacts(req: SizingRequest): SizingFacts;
  /** /proc/driver/nvidia/gpus entries, or null. */
  procGpus(): string[] | null;
  env(name: string): string | undefined;
}

/** The GPU probe of src/engine/gpus.ts over a doctor probe's answers. */
export async function gpuProbeOf(p: DoctorProbe): Promise<GpuProbe> {
  const smi = await p.run(["nvidia-smi", "-L"], 10_000);
  return { nvidiaSmi: () => (smi && smi.code === 0 ? smi.out : null), procGpus: () => p.procGpus() };
}

function isExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

export function systemProbe(env: Record<string, string | undefined> = process.env): DoctorProbe {
  const which = (cmd: string): string | null => {
    if (cmd.includes("/")) return isExecutable(cmd) ? cmd : null;
    for (const dir of (env.PATH ?? "").split(delimiter)) {
      if (dir === "") continue;
      const p = join(dir, cmd);
      if (isExecutable(p)) return p;
    }
    return null;
  };
  return {
    which,
    async run(argv, timeoutMs) {
      const exe = which(argv[0] ?? "");
      if (exe === null) return null;
      let p;
      try {
        p = Bun.spawn([exe, ...argv.slice(1)], { stdout: "pipe", stderr: "pipe", stdin: "ignore", env: env as Record<string, string> });
      } catch (e) {
        return { code: null, out: "", err: (e as Error).message }; // e.g. ENOEXEC: not a program
      }
      const killer = AbortSignal.timeout(timeoutMs);
      const onAbort = () => p.kill("SIGKILL");
      killer.addEventListener("abort", onAbort);
      const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
      killer.removeEventListener("abort", onAbort);
      return { code: p.signalCode ? null : code, out, err };
    },
    stat(path) {
      try {
        const s = statSync(path);
        return { mode: s.mode, isDir: s.isDirectory(), size: s.size };
      } catch {
        return null;
      }
    },
    readText(path) {
      try {
        return readFileSync(path, "utf8");
      } catch {
        return null;
      }
    },
    async http(url, init) {
      const sentMs = wallClockMs();
      const res = await fetch(url, { method: init.method ?? "GET", headers: init.headers ?? {}, ...(init.body !== undefined ? { body: init.body } : {}), signal: AbortSignal.timeout(init.timeoutMs) });
      const receivedMs = wallClockMs();
      const text = await res.text();
      const date = res.headers.get("date");
      const dateMs = date ? Date.parse(date) : NaN;
      return { status: res.status, text, dateMs: Number.isFinite(dateMs) ? dateMs : null, sentMs, receivedMs };
    },
    portFree: canListen,
    portLeasedBy: (port) => leaseHolderAt(defaultLeaseDir(), port)?.pid ?? null,
    tierFacts: hostFacts,
    procGpus() {
      try {
        return readdirSync("/proc/driver/nvidia/gpus");
      } catch {
        return null;
      }
    },
    env: (name) => env[name],
  };
}
