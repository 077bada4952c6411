// Aggregated vs P/D through `herd run` (issue 13), same engine count (2): herd with two aggregated
// sim engines (least-loaded), against herd with one prefill + one decode sim engine (the P/D plan:
// decider, prefill leg, KV pull over the sims' side channel, decode leg streamed back). Same
// workloads as bench/pd-vs-aggregated.ts (which drives runPd directly, without herd): long input
// (8k in, 256 out) and short (256 in, 256 out), closed loop at a fixed concurrency, fresh prompts.
// P/D runs twice: with pd.min_prefill_tokens 512 (the default: a short prompt stays on the decode
// engine) and 0 (every request through the prefill engine), so the decider's effect shows.
// KV transfer paced as Qwen3-8B's real size (2.25 MiB per 16-token block) over LINK_GBps, scaled by
// the sims' time scale; 1 KiB per block on the wire so loopback is not the bottleneck.
// Figures are model time (wall × time scale); P/D rows as ratios of the aggregated row.
// Run: ./node_modules/.bin/bun bench/pd-vs-aggregated-herd.ts [requests=24] [concurrency=6] [time_scale=10] [link_GBps=25]
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { QWEN3_8B_KV_BYTES_PER_BLOCK } from "../src/engine/sim/options.ts";
import { readStreamTiming, type StreamTiming } from "./lib/stream-timing.ts";

const N = Number(process.argv[2] ?? 24);
const CONC = Number(process.argv[3] ?? 6);
const SCALE = Number(process.argv[4] ?? 10);
const LINK = Number(process.argv[5] ?? 25) * 1e9;
const WIRE_BYTES_PER_BLOCK = 1024;
const ROOT = resolve(import.meta.dir, "..");

interface Herd {
  url: string;
  stop(): Promise<void>;
}

async function startHerd(yaml: string, workers: number): Promise<Herd> {
  const dir = mkdtempSync(join(tmpdir(), "herd-pd-bench-"));
  writeFileSync(join(dir, "herd.yaml"), yaml.replace("DATA_DIR", JSON.stringify(join(dir, "data"))));
  const proc = Bun.spawn([process.execPath, "src/cli.ts", "run", "--config", join(dir, "herd.yaml"), "--listen", "127.0.0.1:0"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  let log = "";
  const dec = new TextDecoder();
  void (async () => {
    for await (const c of proc.stderr as ReadableStream<Uint8Array>) log += dec.decode(c, { stream: true });
  })();
  void (async () => {
    for await (const c of proc.stdout as ReadableStream<Uint8Array>) log += dec.decode(c, { stream: true });
  })();
  const stop = async () => {
    proc.kill("SIGTERM");
    await proc.exited;
    rmSync(dir, { recursive: true, force: true });
  };
  const t0 = performance.now();
  for (;;) {
    const m = /herd ready: listening on (http:\/\/\S+)/.exec(log);
    if (m) {
      const url = m[1]!;
      const ready = async () => ((await (await fetch(`${url}/admin/cluster`)).json()) as any).workers.filter((w: any) => w.state === "ready").length;
      while ((await ready()) < workers) await Bun.sleep(50);
      return { url, stop };
    }
    if (proc.exitCode !== null || performance.now() - t0 > 30_000) {
      await stop();
      throw new Error(`herd did not start:\n${log.slice(-3000)}`);
    }
    await Bun.sleep(50);
  }
}

type Timing = StreamTiming;

async function one(url: string, body: unknown): Promise<Timing> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  return readStreamTiming(res, t0, SCALE);
}

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))]!;

async function closedLoop(url: string, body: (i: number) => unknown): Promise<{ t: Timing[]; s: number }> {
  let next = 0;
  const t: Timing[] = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CONC }, async () => {
    while (next < N) t.push(await one(url, body(next++)));
  }));
  return { t, s: ((performance.now() - t0) / 1000) * SCALE };
}

const SIM = ["--time-scale", String(SCALE), "--output-len", "0"];
const base = (engines: string, pd = "") => `node: { name: bench, data_dir: DATA_DIR }
frontend: { first_token_timeout_ms: 120000, idle_timeout_ms: 60000 }
router: { policy: least-loaded }
${pd}
models: [{ name: sim }]
engines:
${engines}
`;
const rate = (WIRE_BYTES_PER_BLOCK / QWEN3_8B_KV_BYTES_PER_BLOCK) * LINK * SCALE;
const AGG = base(`  - { kind: sim, model: sim, count: 2, args: ${JSON.stringify(SIM)} }`);
const PD = (minPrefill: number) =>
  base(
    `  - { kind: sim, model: sim, role: prefill, count: 1, args: ${JSON.stringify([...SIM, "--kv-bytes-per-block", String(WIRE_BYTES_PER_BLOCK), "--kv-transfer-bytes-per-s", String(Math.round(rate))])} }
  - { kind: sim, model: sim, role: decode, count: 1, args: ${JSON.stringify([...SIM, "--kv-bytes-per-block", String(WIRE_BYTES_PER_BLOCK)])} }`,
    `pd: { min_prefill_tokens: ${minPrefill}, nixl_metadata: none, kv_load_failure_policy: recompute }`,
  );

async function run(label: string, yaml: string, body: (i: number) => unknown) {
  const h = await startHerd(yaml, 2);
  try {
    const { t, s } = await closedLoop(h.url, body);
    return { label, ttftP50: pct(t.map((x) => x.ttftMs), 0.5), ttftP99: pct(t.map((x) => x.ttftMs), 0.99), gapP99: pct(t.map((x) => x.maxGapMs), 0.99), rps: t.length / s };
  } finally {
    await h.stop();
  }
}

async function workload(name: string, inTokens: number, outTokens: number, seed: number) {
  const body = (i: number) => ({ model: "sim", prompt: Array.from({ length: inTokens }, (_, k) => 100 + ((k * 31 + i * 977 + seed) % 60_000)), max_tokens: outTokens, ignore_eos: true, stream: true });
  const rows = [await run("aggregated", AGG, body), await run("P/D (min 512)", PD(512), body), await run("P/D (min 0)", PD(0), body)];
  console.log(`${name} (${inTokens} in, ${outTokens} out, ${N} requests, concurrency ${CONC}, model time, through herd run)`);
  const a = rows[0]!;
  for (const r of rows) {
    const ratio = r === a ? "" : ` | ÷ aggregated: TTFT p50 ×${(r.ttftP50 / a.ttftP50).toFixed(2)}, gap p99 ×${(r.gapP99 / a.gapP99).toFixed(2)}, req/s ×${(r.rps / a.rps).toFixed(2)}`;
    console.log(`  ${r.label.padEnd(14)} TTFT p50 ${r.ttftP50.toFixed(0)} ms p99 ${r.ttftP99.toFixed(0)} ms | worst inter-token gap p99 ${r.gapP99.toFixed(1)} ms | ${r.rps.toFixed(2)} req/s${ratio}`);
  }
}

await workload("long input", 8192, 256, 1);
await workload("short input", 256, 256, 2);
