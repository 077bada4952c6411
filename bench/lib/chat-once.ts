// The frontend benches' common setup (bench/frontend-overhead.ts, frontend-stalls.ts, frontend-ceiling.ts,
// frontend-allocs.ts): one zero-delay sim engine, herd with it as its one external engine, and the
// same small chat against herd, a bare proxy or the engine directly, so their rows compare alike.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

export const MODEL = "bench-sim";

export const chatBody = (stream: boolean) =>
  JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello there" }], max_tokens: 8, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) });

/** One chat POST read whole; its latency in ms. A non-200, a stream without [DONE] or an answer without choices throws. */
export async function chatOnce(url: string, stream: boolean): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: chatBody(stream) });
  const text = await res.text();
  if (res.status !== 200 || (stream ? !text.includes("[DONE]") : !text.includes('"choices"'))) throw new Error(`bad answer ${res.status} from ${url}: ${text.slice(0, 200)}`);
  return performance.now() - t0;
}

/** CPU seconds (user + system) of a process: /proc/PID/stat utime + stime in USER_HZ (100) ticks. */
export function cpuS(pid: number): number {
  try {
    const f = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(f[11]) + Number(f[12])) / 100;
  } catch {
    return NaN;
  }
}

/** The sim engine's argv after the bun executable (run from the repo root): zero delay, no output tokens. */
export const simEngineArgs = (port: number) => ["src/cli.ts", "sim-engine", "--port", String(port), "--model", MODEL, "--zero-delay", "--output-len", "0"];

/** `frontend:` keys from BENCH_MIGRATION_LIMIT (default 3, herd's) and, with `collect`, BENCH_COLLECT_MIN_TOKENS. */
export function migrationKeys(collect: boolean): string {
  const min = process.env.BENCH_COLLECT_MIN_TOKENS;
  return `migration_limit: ${Number(process.env.BENCH_MIGRATION_LIMIT ?? 3)}${collect && min ? `, migration_collect_min_tokens: ${Number(min)}` : ""}`;
}

/** Write herd's config into `dir` (one external engine at `engineUrl`, round-robin; `frontend` keys if any); its path. */
export function writeHerdConfig(dir: string, engineUrl: string, frontend = ""): string {
  const cfg = join(dir, "herd.yaml");
  writeFileSync(
    cfg,
    `node: { name: bench, data_dir: ${JSON.stringify(join(dir, "data"))} }
${frontend ? `frontend: { ${frontend} }\n` : ""}router: { policy: round-robin }
models: [{ name: ${MODEL} }]
engines: [{ kind: external, model: ${MODEL}, url: "${engineUrl}" }]
`,
  );
  return cfg;
}

/** Stop herd (SIGTERM, up to 10 s for its drain), then the engine. */
type Child = { kill(signal?: number | NodeJS.Signals): void; exited: Promise<unknown> };

export async function stopHerdAndEngine(herd: Child, sim: Child): Promise<void> {
  herd.kill("SIGTERM");
  await Promise.race([herd.exited, Bun.sleep(10_000)]);
  sim.kill("SIGTERM");
  await sim.exited;
}
