// `herd run` as a subprocess (sim engines, loopback, random ports) and `herd <command>` runs, for
// the day-2, signal, reload and upgrade tests. Every process started here is killed in stop().
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

/** A config with `count` sim engines of model `model` on loopback; extra YAML sections appended. */
export function simConfigYaml(o: { dir: string; node: string; model?: string; count?: number; listen?: string; extra?: string; simArgs?: string[]; portBase?: number; env?: Record<string, string> }): string {
  const model = o.model ?? `${o.node}-sim`;
  const args = JSON.stringify(o.simArgs ?? ["--time-scale", "50"]);
  return `node: { name: ${o.node}, data_dir: ${JSON.stringify(join(o.dir, "data"))} }
frontend: { listen: ${JSON.stringify(o.listen ?? "127.0.0.1:0")} }
supervisor: { port_range_start: ${o.portBase ?? portBase()}, health_interval_ms: 100, restart_backoff_initial_ms: 100, stop_timeout_ms: 2000 }
models: [{ name: ${model} }]
engines: [{ kind: sim, model: ${model}, count: ${o.count ?? 1}, args: ${args}, env: ${JSON.stringify(o.env ?? {})} }]
${o.extra ?? ""}`;
}

export interface HerdProc {
  proc: ReturnType<typeof Bun.spawn>;
  url: string;
  dir: string;
  configPath: string;
  log(): string;
  /** Resolve when the log matches `re` (searching from `from`, a log length); reject after timeoutMs. */
  waitLog(re: RegExp, timeoutMs?: number, from?: number): Promise<RegExpExecArray>;
  stop(): Promise<void>;
}

export async function startHerd(dir: string, yaml: string, extraArgs: string[] = ["--listen", "127.0.0.1:0"]): Promise<HerdProc> {
  const configPath = join(dir, "herd.yaml");
  writeFileSync(configPath, yaml);
  const proc = Bun.spawn([BUN, "src/cli.ts", "run", "--config", configPath, ...extraArgs], { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore" });
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
    async stop() {
      if (proc.exitCode === null) {
        proc.kill("SIGTERM");
        const t = setTimeout(() => proc.kill("SIGKILL"), 8_000);
        await proc.exited;
        clearTimeout(t);
      }
    },
  };
  try {
    h.url = (await waitLog(/herd ready: listening on (http:\/\/\S+)/))[1]!;
  } catch (e) {
    if (proc.exitCode === null) proc.kill("SIGKILL");
    throw e;
  }
  return h;
}

export function cleanup(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

export interface CliRun {
  code: number;
  out: string;
  err: string;
}

/** `herd ARGS…` from source, bounded in time. */
export async function herdCli(args: string[], env: Record<string, string | undefined> = {}, timeoutMs = 15_000): Promise<CliRun> {
  const p = Bun.spawn([BUN, "src/cli.ts", ...args], { cwd: ROOT, stdout: "pipe", stderr: "pipe", stdin: "ignore", env: { ...process.env, ...env } });
  const t = setTimeout(() => p.kill("SIGKILL"), timeoutMs);
  const [out, err, code] = await Promise.all([new Response(p.stdout as ReadableStream).text(), new Response(p.stderr as ReadableStream).text(), p.exited]);
  clearTimeout(t);
  return { code, out, err };
}

export async function until(what: string, cond: () => boolean | Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!(await cond())) {
    if (performance.now() > end) throw new Error(`timed out waiting for ${what}`);
    await Bun.sleep(25);
  }
}
