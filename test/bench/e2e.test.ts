// herd bench end to end against in-process simulated engines (high time-scale, so runs take ~a second).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BenchIo, benchMain } from "../../src/bench/cli.ts";
import type { BenchResult } from "../../src/workload/report.ts";
import { startSimEngine, type SimEngine } from "../../src/engine/sim/server.ts";

let engine: SimEngine;
let failing: SimEngine;
let dir: string;

function capture(): BenchIo & { stdout: string[]; stderr: string[]; progressLines: string[] } {
  const stdout: string[] = [];
  const stderr: string[] = [];
  const progressLines: string[] = [];
  return { stdout, stderr, progressLines, out: (t) => void stdout.push(t), err: (t) => void stderr.push(t), progress: (l) => void progressLines.push(l) };
}

beforeAll(async () => {
  engine = await startSimEngine({ port: 0, model: "sim-bench", timeScale: 50, seed: 3, hashSeed: 1n });
  failing = await startSimEngine({ port: 0, model: "sim-bench", timeScale: 50, failAfter: 5, hashSeed: 1n });
  dir = mkdtempSync(join(tmpdir(), "herd-bench-"));
});
afterAll(async () => {
  await engine.stop();
  await failing.stop();
  rmSync(dir, { recursive: true, force: true });
});

const read = async (f: string) => JSON.parse(await Bun.file(f).text()) as BenchResult;

describe("herd bench against a simulated engine", () => {
  test("doc-qa rate sweep: sane JSON (contract fields), table, SVG, progress", async () => {
    const io = capture();
    const json = join(dir, "a.json");
    const svg = join(dir, "a.svg");
    const code = await benchMain(
      ["--url", engine.url, "--workload", "doc-qa:documents=2,doc_tokens=300,system_tokens=100,output=16", "--rate", "40,80", "--requests", "30", "--slo", "ttft=2s,itl=500ms", "--json", json, "--svg", svg],
      io,
    );
    expect(io.stderr.filter((l) => !l.startsWith("wrote"))).toEqual([]);
    expect(code).toBe(0);
    const r = await read(json);
    expect(r.config).toMatchObject({ model: "sim-bench", seed: 1, rates: [40, 80], requests: 30, slo: { ttft_s: 2, itl_s: 0.5 } });
    expect(r.runs.map((x) => x.load.rate)).toEqual([40, 80]);
    for (const run of [r, ...r.runs]) {
      for (const m of [run.ttft, run.itl, run.e2e]) {
        expect(m).not.toBeNull();
        expect(m!.p50).toBeGreaterThanOrEqual(0);
        expect(m!.p50).toBeLessThanOrEqual(m!.p90);
        expect(m!.p90).toBeLessThanOrEqual(m!.p95);
        expect(m!.p95).toBeLessThanOrEqual(m!.p99);
      }
      expect(run.ttft!.p99).toBeLessThan(run.e2e!.max + 1e-9);
      expect(run.requests.completed).toBe(30);
      expect(run.errors).toEqual({ total: 0, by_kind: {} });
      expect(run.throughput.requests_per_s).toBeGreaterThan(5);
      expect(run.throughput.tokens_per_s).toBeCloseTo(run.throughput.requests_per_s * 16, 6); // ignore_eos: exactly 16 each
      expect(run.goodput.share).toBe(1);
      // Two documents behind one system prompt: most prompt tokens are served from the prefix cache.
      expect(run.cached_tokens_ratio!).toBeGreaterThan(0.6);
    }
    // words ≈ tokens: 100 + 300 + 50 words, plus a few words of framing and the chat template.
    const prompt = r.runs[0]!.records.map((x) => x.prompt_tokens!);
    for (const p of prompt) expect(p).toBeGreaterThan(450);
    for (const p of prompt) expect(p).toBeLessThan(490);
    const table = io.stdout.join("\n");
    expect(table).toContain("TTFT p95 (ms)");
    expect(table).toContain("40 req/s");
    for (const run of r.runs) {
      expect(run.send_lag!.count).toBe(30);
      expect(run.send_lag!.p50).toBeLessThan(0.5);
    }
    expect(io.progressLines.at(-1)).toMatch(/\[80 req\/s\].*sent 30\s+done 30/);
    const s = await Bun.file(svg).text();
    expect(s.startsWith("<?xml")).toBe(true);
    expect(s).toContain("TTFT p95 vs load");
    expect(s.match(/<path /g)!.length).toBeGreaterThanOrEqual(3 * 2 + 1 + 3);
    expect(s.endsWith("</svg>\n")).toBe(true);
  });

  test("compare: same file → ratios 1.00; a slower B → ratio and 'worse'", async () => {
    const a = join(dir, "a.json");
    const b = join(dir, "b.json");
    const r = await read(a);
    const slower = { ...r, ttft: { ...r.ttft!, p99: r.ttft!.p99 * 2 }, runs: [r.runs[0]] };
    await Bun.write(b, JSON.stringify(slower));
    const same = capture();
    expect(await benchMain(["compare", a, a], same)).toBe(0);
    const rows = same.stdout.join("\n").split("\n").filter((l) => /^(ttft|itl|e2e|throughput|goodput)\./.test(l));
    expect(rows.length).toBeGreaterThan(10);
    for (const row of rows) expect(row).toMatch(/ 1\.00$/);
    const diff = capture();
    expect(await benchMain(["compare", a, b], diff)).toBe(0);
    expect(diff.stdout.join("\n")).toMatch(/ttft\.p99 \(s\)\s+\S+\s+\S+\s+2\.00 worse/);
    const bad = capture();
    expect(await benchMain(["compare", a, join(dir, "missing.json")], bad)).toBe(1);
    expect(await benchMain(["compare", a], capture())).toBe(2);
  });

  test("errors are counted by kind and fail goodput", async () => {
    const io = capture();
    const json = join(dir, "err.json");
    expect(await benchMain(["--url", failing.url, "--model", "sim-bench", "--workload", "fixed:input=20,output=4", "--concurrency", "2", "--requests", "12", "--json", json], io)).toBe(0);
    const r = await read(json);
    expect(r.requests.completed).toBe(5);
    expect(r.errors).toEqual({ total: 7, by_kind: { http_500: 7 } });
    expect(r.goodput.share).toBeCloseTo(5 / 12, 12);
  });

  test("multi-turn closed loop keeps each conversation in order; trace replay at recorded times", async () => {
    const io = capture();
    const json = join(dir, "mt.json");
    expect(await benchMain(["--url", engine.url, "--workload", "multi-turn:sessions=3,turns=3,system_tokens=20,user_tokens=10,output=8", "--concurrency", "4", "--requests", "18", "--json", json], io)).toBe(0);
    const r = await read(json);
    expect(r.requests.completed).toBe(18);
    // A turn starts only after the previous turn of its conversation ended.
    const bySession = new Map<string, { start_s: number; e2e_s: number | null }[]>();
    for (const x of r.runs[0]!.records) bySession.set(x.session, [...(bySession.get(x.session) ?? []), x]);
    for (const turns of bySession.values())
      for (let i = 1; i < turns.length; i++) expect(turns[i]!.start_s).toBeGreaterThanOrEqual(turns[i - 1]!.start_s + turns[i - 1]!.e2e_s! - 1e-3);
    // Later turns re-send earlier turns: the prefix cache serves them.
    expect(r.cached_tokens_ratio!).toBeGreaterThan(0.3);

    const trace = join(dir, "mc.jsonl");
    await Bun.write(trace, [0, 100, 200, 300].map((ms, i) => JSON.stringify({ timestamp: ms, input_length: 600, output_length: 4, hash_ids: [1, 2 + (i % 2)] })).join("\n") + "\n");
    const t = capture();
    const tj = join(dir, "trace.json");
    expect(await benchMain(["--url", engine.url, "--workload", `trace:${trace}`, "--json", tj], t)).toBe(0);
    const tr = await read(tj);
    expect(tr.requests.completed).toBe(4);
    expect(tr.runs[0]!.records.map((x) => x.at_s)).toEqual([0, 0.1, 0.2, 0.3]);
    for (const x of tr.runs[0]!.records) expect(x.start_s).toBeGreaterThanOrEqual(x.at_s - 1e-3);
    expect(tr.runs[0]!.records.map((x) => x.prompt_tokens)).toEqual([600, 600, 600, 600]);
    // Block 1 shared by all; block 2/3 repeat from the third request: ≥ 512 of 600 cached for 3 of 4.
    expect(tr.cached_tokens_ratio!).toBeGreaterThan(0.55);
  });

  test("every load level starts cold by default; --reset-prefix-cache false keeps the cache", async () => {
    const args = ["--url", engine.url, "--workload", "doc-qa:documents=1,doc_tokens=200,system_tokens=50,output=4", "--rate", "100,100", "--requests", "5"];
    const warm = join(dir, "warm.json");
    const cold = join(dir, "cold.json");
    const coldIo = capture();
    expect(await benchMain([...args, "--reset-prefix-cache", "false", "--json", warm], capture())).toBe(0);
    expect(await benchMain([...args, "--json", cold], coldIo)).toBe(0);
    expect(coldIo.stderr.filter((l) => !l.startsWith("wrote"))).toEqual([]);
    const first = async (f: string) => (await read(f)).runs.map((r) => r.records[0]!.cached_tokens);
    const w = await first(warm);
    expect(w[1]!).toBeGreaterThan(200); // the second level reuses the first one's cache
    expect(await first(cold)).toEqual([0, 0]);
    expect((await read(cold)).config).toMatchObject({ reset_prefix_cache: true, reset_prefix_cache_failures: [] });
  });

  test("a server without /reset_prefix_cache: one warning per sweep naming the reason, figures still written", async () => {
    // A stand-in OpenAI server with no reset route (as vLLM without VLLM_SERVER_DEV_MODE=1).
    let resets = 0;
    const plain = Bun.serve({
      port: 0,
      hostname: "127.0.0.1",
      fetch: async (req) => {
        const path = new URL(req.url).pathname;
        if (path === "/reset_prefix_cache") resets++;
        if (path !== "/v1/completions") return new Response(JSON.stringify({ detail: "Not Found" }), { status: 404 });
        return engine.url ? fetch(`${engine.url}/v1/completions`, { method: "POST", body: await req.text(), headers: { "content-type": "application/json" } }) : new Response(null, { status: 500 });
      },
    });
    try {
      const io = capture();
      const json = join(dir, "noreset.json");
      const code = await benchMain(["--url", `http://127.0.0.1:${plain.port}`, "--model", "sim-bench", "--workload", "fixed:input=40,output=2", "--rate", "50,50,50", "--requests", "3", "--json", json], io);
      expect(code).toBe(0);
      expect(resets).toBe(3); // tried before each level
      const warnings = io.stderr.filter((l) => l.includes("reset_prefix_cache"));
      expect(warnings).toHaveLength(1);
      expect(warnings[0]).toContain("HTTP 404 (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)");
      expect((await read(json)).config).toMatchObject({ reset_prefix_cache: true, reset_prefix_cache_failures: [expect.stringContaining("HTTP 404")] });
    } finally {
      await plain.stop(true);
    }
  });

  test("usage errors exit 2 with a reason", async () => {
    for (const argv of [
      ["--workload", "doc-qa"],
      ["--workload", "nope", "--rate", "1"],
      ["--workload", "fixed", "--rate", "0"],
      ["--workload", "fixed", "--rate", "1", "--concurrency", "2"],
      ["--workload", "fixed", "--rate", "1", "--bogus", "1"],
      ["--workload", "trace:/nonexistent.jsonl"],
      ["--workload", "fixed", "--rate", "1", "--slo", "ttft=soon"],
    ]) {
      const io = capture();
      expect(await benchMain(["--url", engine.url, "--model", "sim-bench", ...argv], io)).toBe(2);
      expect(io.stderr.join("\n")).toMatch(/^herd bench: /);
    }
    const closed = Bun.serve({ port: 0, fetch: () => new Response() });
    const deadUrl = `http://127.0.0.1:${closed.port}`;
    await closed.stop(true);
    const dead = capture();
    expect(await benchMain(["--url", deadUrl, "--model", "m", "--workload", "fixed:input=5,output=2", "--concurrency", "2", "--requests", "4"], dead)).toBe(1);
    expect(dead.stdout.join("\n")).toContain("connect:4");
    expect(dead.stderr.join("\n")).toContain("no request completed (connect: 4)");
    const help = capture();
    expect(await benchMain(["--help"], help)).toBe(0);
    expect(help.stdout.join("")).toContain("--workload");
  });
});
