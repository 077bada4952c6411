// Tracing overhead: three `herd run` nodes in front of one zero-delay sim engine (external worker),
// same run: tracing off (no SDK loaded), tracing on with every request sampled (spans exported as
// OTLP/HTTP protobuf to a local sink that discards them), and tracing on with sampler always_off.
// Prints p50/p99 latency at concurrency 1 (streaming) and max requests/s at concurrency C, each as a
// ratio to tracing off. The nodes alternate in rounds so load from other processes falls on all.
// Run: ./node_modules/.bin/bun bench/tracing-overhead.ts [requests=300] [concurrency=16] [seconds=3]
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { closedLoop, freePort, waitUrl } from "./lib/child.ts";

const N = Number(process.argv[2] ?? 300);
const CONC = Number(process.argv[3] ?? 16);
const SECONDS = Number(process.argv[4] ?? 3);
const ROUNDS = 5;
const ROOT = resolve(import.meta.dir, "..");
const MODEL = "bench-sim";
const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello there" }], max_tokens: 8, stream: true });

async function once(url: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const text = await res.text();
  if (res.status !== 200 || !text.includes("[DONE]")) throw new Error(`bad answer ${res.status}: ${text.slice(0, 200)}`);
  return performance.now() - t0;
}

const pct = (s: number[], p: number) => s[Math.min(s.length - 1, Math.floor(p * s.length))]!;

function window(url: string, ms: number): Promise<number> {
  return closedLoop(CONC, ms, () => once(url));
}

let exported = 0;
const sink = Bun.serve({ port: 0, hostname: "127.0.0.1", async fetch(req) {
  await req.arrayBuffer();
  exported++;
  return new Response(new Uint8Array(0), { headers: { "content-type": "application/x-protobuf" } });
} });
const dir = mkdtempSync(join(tmpdir(), "herd-bench-tracing-"));
const simPort = await freePort();
const sim = Bun.spawn([process.execPath, "src/cli.ts", "sim-engine", "--port", String(simPort), "--model", MODEL, "--zero-delay", "--output-len", "0"], { cwd: ROOT, stdout: "ignore", stderr: "pipe" });
const variants = [
  { name: "tracing off", tracing: "" },
  { name: "on, all sampled", tracing: "tracing: { enabled: true, sampler: always_on }" },
  { name: "on, always_off", tracing: "tracing: { enabled: true, sampler: always_off }" },
];
const procs: ReturnType<typeof Bun.spawn>[] = [];
try {
  const urls: string[] = [];
  for (const [i, v] of variants.entries()) {
    const cfg = join(dir, `herd-${i}.yaml`);
    writeFileSync(cfg, `node: { name: bench${i}, data_dir: ${JSON.stringify(join(dir, `data-${i}`))} }
router: { policy: round-robin }
models: [{ name: ${MODEL} }]
engines: [{ kind: external, model: ${MODEL}, url: "http://127.0.0.1:${simPort}" }]
${v.tracing}
`);
    const p = Bun.spawn([process.execPath, "src/cli.ts", "run", "--config", cfg, "--listen", "127.0.0.1:0"], {
      cwd: ROOT, stdout: "ignore", stderr: "pipe",
      env: { ...process.env, HERD_LOG: "info", OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${sink.port}`, OTEL_EXPORTER_OTLP_PROTOCOL: "http/protobuf" },
    });
    procs.push(p);
    urls.push(await waitUrl(p, /herd ready: listening on (http:\/\/\S+)/, v.name));
  }
  for (let i = 0; i < 30; i++) for (const u of urls) await once(u);
  const lat = urls.map(() => [] as number[]);
  for (let r = 0; r < ROUNDS; r++) for (const [k, u] of urls.entries()) for (let i = 0; i < N / ROUNDS; i++) lat[k]!.push(await once(u));
  for (const l of lat) l.sort((a, b) => a - b);
  const rps = urls.map(() => 0);
  for (const u of urls) await window(u, 300);
  for (let s = 0; s < SECONDS; s++) for (const [k, u] of urls.entries()) rps[k]! += (await window(u, 1000)) / SECONDS;
  console.log(`tracing overhead (streaming, zero-delay sim engine): ${N} sequential requests per latency column, ${CONC} concurrent clients for ${SECONDS}×1 s per throughput column; the nodes alternate; all processes share this box (${navigator.hardwareConcurrency} cores)`);
  for (const [k, v] of variants.entries()) {
    const p50 = pct(lat[k]!, 0.5);
    const p99 = pct(lat[k]!, 0.99);
    const ratio = (x: number, base: number) => `${(x / base).toFixed(2)}x`;
    console.log(`${v.name.padEnd(18)} p50 ${p50.toFixed(3).padStart(7)} ms (${ratio(p50, pct(lat[0]!, 0.5))})   p99 ${p99.toFixed(3).padStart(7)} ms (${ratio(p99, pct(lat[0]!, 0.99))})   ${rps[k]!.toFixed(0).padStart(6)} req/s (${ratio(rps[k]!, rps[0]!)})`);
  }
  console.log(`OTLP export requests received by the sink: ${exported}`);
} finally {
  for (const p of procs) p.kill("SIGTERM");
  await Promise.race([Promise.all(procs.map((p) => p.exited)), Bun.sleep(10_000)]);
  sim.kill("SIGTERM");
  await sim.exited;
  sink.stop(true);
  rmSync(dir, { recursive: true, force: true });
}
