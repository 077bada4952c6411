// `herd run` as a subprocess (sim engines, loopback, random ports) and `herd <command>` runs, for
// the day-2, signal, reload and upgrade tests. Every process started here is killed in stop().
import { join } from "node:path";
import { BUN, ROOT, portBase, startHerd as startHerdWith, type HerdProc } from "../helpers/herd.ts";

export { BUN, ROOT, cleanup, portBase, tempDir, type HerdProc } from "../helpers/herd.ts";

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

/** The shared starter (test/helpers/herd.ts) with this folder's positional `extraArgs`. */
export function startHerd(dir: string, yaml: string, extraArgs: string[] = ["--listen", "127.0.0.1:0"]): Promise<HerdProc> {
  return startHerdWith(dir, yaml, { args: extraArgs });
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
