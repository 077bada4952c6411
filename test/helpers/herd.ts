// `herd run` as a subprocess for end-to-end and ops tests: write the config into a temp dir, spawn
// `bun src/cli.ts run`, capture stdout+stderr into one log, wait for "herd ready", and stop it with
// SIGTERM then SIGKILL after a bound. Tests call stop() in afterAll/finally, so a failed assertion
// never leaves herd (and the engines it supervises) running.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

export const ROOT = resolve(import.meta.dir, "../..");
export const BUN = process.execPath;

/** Below the kernel's ephemeral range (32768+), so outgoing connections never hold an engine's port. */
export function portBase(): number {
  return 21_000 + Math.floor(Math.random() * 11_000);
}

export function tempDir(prefix: string): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function cleanup(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/** Calls onLine for each complete line of `stream` (for peers whose output is line-delimited). */
export async function readLines(stream: ReadableStream<Uint8Array>, onLine: (l: string) => void): Promise<void> {
  const dec = new TextDecoder();
  let buf = "";
  for await (const chunk of stream) {
    buf += dec.decode(chunk, { stream: true });
    let i: number;
    while ((i = buf.indexOf("\n")) >= 0) {
      onLine(buf.slice(0, i));
      buf = buf.slice(i + 1);
    }
  }
}

/** Polls fn (a throw counts as "not yet") until it returns a truthy value; the error carries the log tail. */
export async function waitFor<T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs: number, log: () => string = () => ""): Promise<T> {
  const t0 = performance.now();
  for (;;) {
    const v = await fn().catch(() => null);
    if (v) return v;
    if (performance.now() - t0 > timeoutMs) throw new Error(`timed out waiting for ${what}\n--- herd log ---\n${log().slice(-4000)}`);
    await Bun.sleep(50);
  }
}

export interface HerdProc {
  proc: ReturnType<typeof Bun.spawn>;
  url: string;
  dir: string;
  configPath: string;
  log(): string;
  /** Resolve when the log matches `re` (searching from `from`, a log length); reject after timeoutMs. */
  waitLog(re: RegExp, timeoutMs?: number, from?: number): Promise<RegExpExecArray>;
  /** SIGTERM, then SIGKILL if still running after graceMs; resolves once the process has exited. */
  stop(graceMs?: number): Promise<void>;
}

export interface StartOptions {
  /** Arguments after `run --config <file>`; default listens on a random loopback port. */
  args?: string[];
  /** Added to the inherited environment. */
  env?: Record<string, string>;
  readyTimeoutMs?: number;
}

/** Writes `yaml` to dir/herd.yaml, starts herd on it and resolves once it logs "herd ready" (url set). */
export async function startHerd(dir: string, yaml: string, opts: StartOptions = {}): Promise<HerdProc> {
  const configPath = join(dir, "herd.yaml");
  writeFileSync(configPath, yaml);
  const args = opts.args ?? ["--listen", "127.0.0.1:0"];
  const env = opts.env ? { ...process.env, ...opts.env } : undefined;
  const proc = Bun.spawn([BUN, "src/cli.ts", "run", "--config", configPath, ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore", env });
  let text = "";
  const dec = new TextDecoder();
  const pump = async (s: ReadableStream<Uint8Array>) => {
    for await (const c of s) text += dec.decode(c, { stream: true });
  };
  void pump(proc.stderr as ReadableStream<Uint8Array>);
  void pump(proc.stdout as ReadableStream<Uint8Array>);
  const waitLog = async (re: RegExp, timeoutMs = 20_000, from = 0): Promise<RegExpExecArray> => {
    const end = performance.now() + timeoutMs;
    for (;;) {
      const m = re.exec(text.slice(from));
      if (m) return m;
      if (performance.now() > end) throw new Error(`herd log never matched ${re} within ${timeoutMs} ms\n--- herd log ---\n${text.slice(-4000)}`);
      if (proc.exitCode !== null && !re.exec(text.slice(from))) {
        await Bun.sleep(100); // the last lines may still be in the pipe
        const late = re.exec(text.slice(from));
        if (late) return late;
        throw new Error(`herd exited (${proc.exitCode}) before its log matched ${re}\n--- herd log ---\n${text.slice(-4000)}`);
      }
      await Bun.sleep(25);
    }
  };
  const h: HerdProc = {
    proc,
    url: "",
    dir,
    configPath,
    log: () => text,
    waitLog,
    async stop(graceMs = 8_000) {
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), graceMs);
        await proc.exited;
        clearTimeout(t);
      }
    },
  };
  try {
    h.url = (await waitLog(/herd ready: listening on (https?:\/\/\S+)/, opts.readyTimeoutMs))[1]!;
  } catch (e) {
    if (proc.exitCode === null) proc.kill("SIGKILL");
    throw e;
  }
  return h;
}

/**
 * The nodes of a multi-node e2e test on loopback: node `names[i]` listens on `base + i` (set `base`
 * in beforeAll, e.g. from portBase()), `procs` holds the started herds, `logs()` their last
 * `logTailChars` each for a failed wait's message, and `waitFor` defaults to `waitMs`.
 */
export class HerdNodes<N extends string> {
  base = 0;
  readonly procs = new Map<N, HerdProc>();
  constructor(readonly names: readonly N[], private readonly o: { logTailChars: number; waitMs: number }) {}
  readonly port = (n: N): number => this.base + this.names.indexOf(n);
  readonly url = (n: N): string => `http://127.0.0.1:${this.port(n)}`;
  readonly logs = (): string => [...this.procs].map(([n, h]) => `--- ${n} ---\n${h.log().slice(-this.o.logTailChars)}`).join("\n");
  readonly waitFor = <T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = this.o.waitMs): Promise<T> => waitFor(what, fn, timeoutMs, this.logs);
}
