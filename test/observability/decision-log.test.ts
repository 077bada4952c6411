// Decision records: the rotating file is bounded and loses nothing it did not count; `herd run`
// with decision_log writes one line per request (prompt length, cached tokens, worker, cost terms,
// outcome, TTFT/ITL/E2E, Mooncake-style hash ids shared by shared prefixes); `herd simulate --trace`
// replays such a log — one recorded by herd run, and a day-long one across rotated files — against
// other policies and replica counts.
import { afterAll, describe, expect, test } from "bun:test";
import { readFileSync, readdirSync, statSync } from "node:fs";
import { join } from "node:path";
import { VirtualClock } from "../../src/core/clock.ts";
import { createLogger } from "../../src/core/log.ts";
import type { DecisionRecord } from "../../src/request/record.ts";
import { RecordFile, recordFiles } from "../../src/request/record-file.ts";
import { simulateMain } from "../../src/simulate/cli.ts";
import { parseDecisionLog } from "../../src/workload/trace.ts";
import { cleanup, portBase, startHerd, tempDir, waitFor, type HerdProc } from "../helpers/herd.ts";

const quiet = () => createLogger("test", { level: "error" });

function record(i: number, atMs: number, over: Partial<DecisionRecord> = {}): DecisionRecord {
  return {
    timestamp: atMs, model: "herd-sim", input_length: 1200 + (i % 7) * 100, output_length: 20 + (i % 5), max_tokens: 64, hash_ids: [1000 + (i % 3), 2000 + (i % 6)],
    session_id: `u${i % 10}`, worker: `n/sim-${i % 2}`, policy: "kv", terms: { cost: 3.5, overlap_gpu: 2 }, reason: "lowest cost", candidates: 2,
    cached_tokens: 512, predicted_cached_tokens: 512, outcome: "complete", status: 200, error: null, ttft_ms: 40, itl_ms: 9, e2e_ms: 250, ...over,
  };
}

async function capture(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  let out = "";
  let err = "";
  const code = await simulateMain(argv, { out: (t) => void (out += t + "\n"), err: (t) => void (err += t + "\n") });
  return { code, out, err };
}

describe("the decision log file", () => {
  const dir = tempDir("herd-dlog-");
  afterAll(() => cleanup(dir));

  test("rotates by size, keeps `files` old ones, and every line written is a whole record", () => {
    const clock = new VirtualClock(0);
    const path = join(dir, "rot", "decisions.jsonl");
    const f = new RecordFile({ path, maxBytes: 8192, files: 2, bufferBytes: 2048, clock, log: quiet() });
    f.start();
    for (let i = 0; i < 400; i++) {
      f.write(record(i, 1_000_000 + i * 100));
      if (i % 10 === 0) clock.advance(1000); // the 1 s flush timer
    }
    f.close();
    const names = readdirSync(join(dir, "rot")).sort();
    expect(names).toEqual(["decisions.jsonl", "decisions.jsonl.1", "decisions.jsonl.2"]);
    for (const n of names) expect(statSync(join(dir, "rot", n)).size).toBeLessThanOrEqual(8192);
    const kept = recordFiles(path).flatMap((p) => readFileSync(p, "utf8").trim().split("\n").map((l) => JSON.parse(l) as DecisionRecord));
    // Oldest first across the files, consecutive, ending with the last one written.
    const ts = kept.map((r) => r.timestamp);
    expect(ts.at(-1)).toBe(1_000_000 + 399 * 100);
    expect(ts).toEqual([...ts].sort((a, b) => a - b));
    expect(ts.every((t, i) => i === 0 || t - ts[i - 1]! === 100)).toBe(true);
    expect(kept.length).toBeLessThan(400); // older lines went with the deleted file
    expect(f.written).toBe(400);
    expect(f.dropped).toBe(0);
  });

  test("a day of records across rotated files replays in herd simulate against two policies", async () => {
    const clock = new VirtualClock(0);
    const path = join(dir, "day", "decisions.jsonl");
    const f = new RecordFile({ path, maxBytes: 64 * 1024, files: 10, bufferBytes: 4096, clock, log: quiet() });
    f.start();
    const day0 = Date.UTC(2026, 10, 30);
    // 600 requests over 24 h, busier by day; a few refusals of bad requests that must not replay.
    let n = 0;
    for (let i = 0; i < 600; i++) {
      const hour = (i / 600) * 24;
      f.write(record(i, day0 + Math.round(hour * 3_600_000)));
      n++;
      if (i % 100 === 7) f.write(record(i, day0 + Math.round(hour * 3_600_000) + 1, { outcome: "refused", status: 400, error: "invalid", worker: null }));
    }
    f.close();
    expect(recordFiles(path).length).toBeGreaterThan(1);
    const parsed = parseDecisionLog(recordFiles(path).map((p) => ({ text: readFileSync(p, "utf8"), source: p })));
    expect(parsed).toHaveLength(n);
    const r = await capture(["--trace", path, "--policy", "round-robin,kv", "--replicas", "1,2", "--json", join(dir, "day.json")]);
    expect(r.err).toContain(`simulated kv × 2 (trace): ${n} requests`);
    expect(r.code).toBe(0);
    const json = JSON.parse(readFileSync(join(dir, "day.json"), "utf8")) as { config: { workload: { kind: string; requests: number } }; runs: unknown[] };
    expect(json.config.workload).toMatchObject({ kind: "trace", requests: n });
    expect(r.out).toContain(`workload decision log ${path}`);
    expect(json.runs).toHaveLength(4);
    // The replay spans the recorded day in virtual time.
    expect(parsed.at(-1)!.at_s).toBeGreaterThan(86_000);
    expect(r.err).toMatch(/trace\): 600 requests, 8\d{4}\.\d s virtual/);
  }, 120_000);

  test("--trace and --workload together are a usage error", async () => {
    const r = await capture(["--trace", join(dir, "nothing.jsonl"), "--workload", "doc-qa", "--rate", "1"]);
    expect(r.code).toBe(2);
    expect(r.err).toContain("not both");
  });
});

describe("herd run writes a decision log that herd simulate replays", () => {
  const dir = tempDir("herd-dlog-run-");
  let herd: HerdProc | null = null;
  afterAll(async () => {
    await herd?.stop();
    cleanup(dir);
  });

  test("one line per request with the chosen worker's terms, then a replay against other policies", async () => {
    herd = await startHerd(dir, `node: { name: rec-node, data_dir: ${JSON.stringify(join(dir, "data"))} }
models: [{ name: herd-sim, path: herd-sim }]
engines:
  - { kind: sim, model: herd-sim, count: 2, args: ["--time-scale", "10"] }
supervisor: { port_range_start: ${portBase()} }
decision_log: { path: decisions.jsonl }
`);
    await waitFor("both engines ready", async () => ((await (await fetch(`${herd!.url}/admin/cluster`)).json()) as { workers: { state: string }[] }).workers.filter((w) => w.state === "ready").length === 2, 30_000, herd.log);
    const doc = (d: number) => `Document ${d}. ${"Every line of this shared document repeats so its prefix spans many KV blocks. ".repeat(130)}`;
    const N = 24;
    for (let i = 0; i < N; i += 4) {
      await Promise.all([0, 1, 2, 3].map(async (k) => {
        const j = i + k;
        const r = await fetch(`${herd!.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json", "x-session-id": `user-${j % 3}` },
          body: JSON.stringify({ model: "herd-sim", stream: j % 2 === 0, stream_options: j % 2 === 0 ? { include_usage: true } : undefined, max_tokens: 12, messages: [{ role: "system", content: doc(j % 2) }, { role: "user", content: `question ${j}` }] }),
        });
        await r.text();
      }));
    }
    // A bad request is recorded too (refused, 400) and is not replayed.
    await (await fetch(`${herd.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"model":"herd-sim"}' })).text();
    await herd.stop(); // flushes the log
    const path = join(dir, "data", "decisions.jsonl");
    const lines = readFileSync(path, "utf8").trim().split("\n").map((l) => JSON.parse(l) as DecisionRecord);
    expect(lines).toHaveLength(N + 1);
    const ok = lines.filter((l) => l.outcome === "complete");
    expect(ok).toHaveLength(N);
    for (const l of ok) {
      expect(l.status).toBe(200);
      expect(l.worker).toMatch(/^rec-node\/sim-[01]$/);
      expect(l.policy).toBe("kv");
      expect(l.terms).toHaveProperty("cost");
      expect(l.candidates).toBe(2);
      expect(l.input_length).toBeGreaterThan(500);
      expect(l.output_length).toBe(12);
      expect(l.e2e_ms).toBeGreaterThan(0);
      // A stream has a first token and gaps between tokens; a whole answer has neither.
      if (l.ttft_ms !== null) {
        expect(l.itl_ms).toBeGreaterThan(0);
        expect(l.e2e_ms).toBeGreaterThanOrEqual(l.ttft_ms);
      } else expect(l.itl_ms).toBeNull();
      expect(l.hash_ids.length).toBeGreaterThanOrEqual(2);
      expect(l.session_id).toMatch(/^user-\d$/);
    }
    expect(ok.filter((l) => l.ttft_ms !== null)).toHaveLength(N / 2);
    // Streams with include_usage and every non-streaming answer report cached tokens.
    expect(ok.filter((l) => l.cached_tokens !== null).length).toBe(N);
    // Same document, same leading hash ids; the two documents share none.
    expect(ok.filter((l) => l.hash_ids[0] === ok[0]!.hash_ids[0]).length).toBeGreaterThan(1);
    expect(new Set(ok.map((l) => l.hash_ids[0])).size).toBe(2);
    expect(lines.find((l) => l.outcome === "refused")).toMatchObject({ status: 400, error: "invalid", worker: null });

    const r = await capture(["--trace", path, "--policy", "round-robin,session,kv", "--replicas", "2,3"]);
    expect(r.code).toBe(0);
    for (const p of ["round-robin", "session", "kv"]) for (const n of [2, 3]) expect(r.err).toContain(`simulated ${p} × ${n} (trace): ${N} requests`);
    expect(r.out).toContain("kv");
  }, 120_000);
});
