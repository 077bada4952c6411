// herd simulate in virtual time: determinism per seed, sanity properties of the what-if answers,
// frontend-style lease accounting, the CLI's table/JSON and the replica search.
import { describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { defaultConfig } from "../../src/config/index.ts";
import type { PolicyName } from "../../src/config/types.ts";
import { DEFAULT_OPTIONS } from "../../src/engine/sim/options.ts";
import { parseSyntheticWorkload, plan } from "../../src/workload/plan.ts";
import { parseTrace, toJsonl } from "../../src/workload/trace.ts";
import { summarize } from "../../src/workload/stats.ts";
import { PromptEncoder } from "../../src/simulate/prompts.ts";
import { type RunSpec, simulateRun } from "../../src/simulate/run.ts";
import { simulateMain } from "../../src/simulate/cli.ts";
import type { ClusterConfig } from "../../src/simulate/cluster.ts";

const base = defaultConfig({ hostname: "sim", dataDir: "/tmp/herd-simulate-test" });
const encoder = await PromptEncoder.load(null, 16);

function cluster(over: Partial<ClusterConfig> & { kvBlocks?: number } = {}): ClusterConfig {
  const { kvBlocks, ...rest } = over;
  return {
    model: "m", replicas: 2, policy: "round-robin", router: base.router, frontend: base.frontend,
    engine: { ...DEFAULT_OPTIONS, kvBlocks: kvBlocks ?? DEFAULT_OPTIONS.kvBlocks }, kvEventDelayMs: 0, seed: 1, ...rest,
  };
}
function spec(workload: string, rate: number, requests: number, over: Partial<RunSpec> = {}): RunSpec {
  return {
    workload: parseSyntheticWorkload(workload), arrivals: { kind: "poisson", rate }, limit: { requests, duration_s: null },
    concurrency: null, duration_s: null, ordered: false, ignoreEos: true, ...over,
  };
}
const summary = (r: ReturnType<typeof simulateRun>) => summarize(r.records, { warmup_s: 0, slo: {} });

describe("herd simulate", () => {
  test("same seed → identical records; another seed → different arrivals", () => {
    const c = cluster({ policy: "kv", replicas: 3 });
    const s = spec("multi-turn:sessions=6,turns=4,system_tokens=100,user_tokens=50,output=16", 10, 60, { ordered: true });
    const a = simulateRun(c, s, encoder);
    const b = simulateRun(c, s, encoder);
    expect(a.records.length).toBe(60);
    expect(b.records).toEqual(a.records);
    expect(b.replicas).toEqual(a.replicas);
    const other = simulateRun({ ...c, seed: 2 }, s, encoder);
    expect(other.records.map((r) => r.at_s)).not.toEqual(a.records.map((r) => r.at_s));
  }, 20_000);

  test("more replicas → lower TTFT p95 at a fixed offered load", () => {
    const p95 = [1, 2, 4].map((n) => summary(simulateRun(cluster({ replicas: n }), spec("fixed:input=2000,output=32", 30, 100), encoder)).ttft!.p95);
    expect(p95[1]!).toBeLessThan(p95[0]!);
    expect(p95[2]!).toBeLessThan(p95[1]!);
  }, 20_000);

  test("kv beats round-robin on doc-qa prefix hits when an engine cannot hold every document", () => {
    const s = spec("doc-qa:documents=8,doc_tokens=1000,system_tokens=100,question_tokens=20,output=16", 20, 200);
    const hit = (policy: PolicyName) => summary(simulateRun(cluster({ policy, replicas: 4, kvBlocks: 200 }), s, encoder)).cached_tokens_ratio!;
    const rr = hit("round-robin");
    const kv = hit("kv");
    expect(kv).toBeGreaterThan(rr + 0.1);
  }, 20_000);

  test("a trace frozen from a synthetic plan (toJsonl) replays to the same records at its own times", () => {
    const s = spec("hot-prefix:prefixes=5,prefix_tokens=200,suffix_tokens=30,output=8", 15, 50);
    const synthetic = simulateRun(cluster({ policy: "kv" }), s, encoder);
    const trace = parseTrace(toJsonl(plan(s.workload, s.arrivals, s.limit, 1)));
    const replay = simulateRun(cluster({ policy: "kv" }), { ...s, workload: { kind: "trace", file: "mem", requests: trace }, arrivals: { kind: "recorded" } }, encoder);
    expect(replay.records.map((r) => [r.at_s, r.prompt_tokens, r.cached_tokens, r.ttft_s])).toEqual(synthetic.records.map((r) => [r.at_s, r.prompt_tokens, r.cached_tokens, r.ttft_s]));
  }, 20_000);

  test("KV events that reach the index late cost kv prefix hits (no predictions to cover the gap)", () => {
    const s = spec("doc-qa:documents=8,doc_tokens=1000,system_tokens=100,question_tokens=20,output=16", 20, 200);
    const router = { ...base.router, kv: { ...base.router.kv, predicted_ttl_ms: 0 } };
    const hit = (delay: number) => summary(simulateRun(cluster({ policy: "kv", replicas: 4, kvBlocks: 200, kvEventDelayMs: delay, router }), s, encoder)).cached_tokens_ratio!;
    const prompt = hit(0);
    const late = hit(5_000);
    console.log(`kv prefix hit: events at once ${prompt.toFixed(3)}, 5 s late ${late.toFixed(3)}`);
    expect(late).toBeLessThan(prompt - 0.02);
  }, 20_000);

  test("requests the engine refuses (400) are records with errors; a closed loop of them does not recurse", () => {
    const c = cluster({ policy: "least-loaded" });
    const run = simulateRun({ ...c, engine: { ...c.engine, maxModelLen: 100 } }, spec("fixed:input=200,output=8", 1, 3000, { arrivals: { kind: "closed" }, concurrency: 2 }), encoder);
    expect(run.records.length).toBe(3000);
    expect(run.records.every((r) => r.error === "http_400")).toBe(true);
    expect(run.in_flight_left).toBe(0);
  }, 20_000);

  test("leases balance: every in-flight count returns to zero; ordered sessions never overlap", () => {
    const s = spec("multi-turn:sessions=4,turns=3,system_tokens=100,user_tokens=40,output=8", 50, 40, { ordered: true });
    const run = simulateRun(cluster({ policy: "session", replicas: 2 }), s, encoder);
    expect(run.records.every((r) => r.error === null)).toBe(true);
    const bySession = new Map<string, { start: number; end: number }[]>();
    for (const r of run.records) bySession.set(r.session, [...(bySession.get(r.session) ?? []), { start: r.start_s, end: r.start_s + r.e2e_s! }]);
    for (const spans of bySession.values()) for (let i = 1; i < spans.length; i++) expect(spans[i]!.start).toBeGreaterThanOrEqual(spans[i - 1]!.end - 1e-9);
    expect(run.replicas.reduce((n, r) => n + r.requests, 0)).toBe(40);
    expect(run.in_flight_left).toBe(0);
  }, 20_000);

  test("an evicting workload shows evicted-then-reused blocks and what a CPU tier would add", () => {
    const s = spec("hot-prefix:prefixes=40,prefix_tokens=600,suffix_tokens=20,zipf=0.6,output=8", 30, 300);
    const run = simulateRun(cluster({ policy: "kv", replicas: 2, kvBlocks: 300 }), s, encoder);
    const j = run.reuse.toJSON() as { evicted_reuse_share: number; cpu_tier: { capacity_x_gpu: number; extra_hit_share: number }[] };
    expect(j.evicted_reuse_share).toBeGreaterThan(0.05);
    const extra = j.cpu_tier.map((t) => t.extra_hit_share);
    for (let i = 1; i < extra.length; i++) expect(extra[i]!).toBeGreaterThanOrEqual(extra[i - 1]!);
    expect(extra.at(-1)!).toBeLessThanOrEqual(j.evicted_reuse_share + 1e-12);
    expect(run.sharing.share).toBeGreaterThan(0.8);
  }, 20_000);

  test("CLI: table, answers and JSON; replica search finds the smallest count meeting the SLO", async () => {
    const dir = mkdtempSync(join(tmpdir(), "herd-sim-"));
    try {
      const out: string[] = [];
      const err: string[] = [];
      const json = join(dir, "s.json");
      const code = await simulateMain(
        ["--workload", "fixed:input=1000,output=16", "--rate", "40", "--requests", "120", "--replicas", "search:16", "--policy", "round-robin,least-loaded", "--slo", "ttft=150ms", "--json", json],
        { out: (t) => void out.push(t), err: (t) => void err.push(t) },
      );
      expect(code).toBe(0);
      const text = out.join("\n");
      expect(text).toContain("TTFT p50");
      expect(text).toContain("How many replicas does the SLO need?");
      const r = (await Bun.file(json).json()) as { herd_simulate: number; runs: { policy: string; replicas: number; meets_slo: boolean }[]; answers: { replicas_needed: { by_policy: { policy: string; smallest_replicas_meeting_slo: number | null }[] } } };
      expect(r.herd_simulate).toBe(1);
      for (const p of ["round-robin", "least-loaded"]) {
        const runs = r.runs.filter((x) => x.policy === p);
        const best = r.answers.replicas_needed.by_policy.find((x) => x.policy === p)!.smallest_replicas_meeting_slo;
        expect(best).not.toBeNull();
        expect(best!).toBeGreaterThan(1);
        expect(runs.find((x) => x.replicas === best)!.meets_slo).toBe(true);
        expect(runs.find((x) => x.replicas === best! - 1)!.meets_slo).toBe(false);
      }
      expect(await simulateMain(["--workload", "nope", "--rate", "1"], { out: () => {}, err: (t) => void err.push(t) })).toBe(2);
      expect(await simulateMain(["--workload", "fixed", "--rate", "1", "--policy", "magic"], { out: () => {}, err: () => {} })).toBe(2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 30_000);
});
