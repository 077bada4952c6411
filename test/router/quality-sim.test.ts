// A reduced routing quality run (bench/routing-quality.ts has the full one): document Q&A on 4
// simulated engines in virtual time, seeded. herd's default kv configuration must keep each document
// on few engines (higher engine prefix-hit rate) and so beat round-robin and Dynamo's default knobs
// on TTFT p95 with the same requests at the same times.
import { describe, expect, test } from "bun:test";
import { type Row, type Scenario, runOne, variants } from "../../bench/routing-quality/lib.ts";

const docQa: Scenario = {
  key: "a", name: "doc-qa (reduced)", ordered: false, rate: 16, requests: 700, warmup_s: 10,
  about: "test",
  workload: { kind: "doc-qa", documents: 12, doc_tokens: 3000, system_tokens: 1000, question_tokens: 50, users: 100, output: 64 },
};

describe("routing quality (reduced, seeded)", () => {
  test("doc-qa: kv (herd) has the best prefix-hit rate and TTFT p95, well ahead of round-robin", async () => {
    const want = ["round-robin", "kv (herd)", "kv (Dynamo)"];
    const rows = new Map<string, Row>();
    for (const v of variants().filter((x) => want.includes(x.name))) rows.set(v.name, await runOne(docQa, v, 7, { kvBlocks: 1024 }));
    const p95 = (n: string) => rows.get(n)!.summary.ttft!.p95;
    const hit = (n: string) => rows.get(n)!.prefix_hit!;
    for (const r of rows.values()) expect(r.summary.requests.failed).toBe(0);
    expect(hit("kv (herd)")).toBeGreaterThan(hit("round-robin") + 0.1);
    expect(hit("kv (herd)")).toBeGreaterThanOrEqual(hit("kv (Dynamo)"));
    expect(p95("kv (herd)")).toBeLessThan(p95("kv (Dynamo)"));
    expect(p95("kv (herd)") * 2).toBeLessThan(p95("round-robin"));
  }, 60_000);
});
