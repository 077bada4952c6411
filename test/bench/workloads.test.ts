import { describe, expect, test } from "bun:test";
import { SeededRng } from "../../src/core/rng.ts";
import { BenchInputError, parseSyntheticWorkload, plan, type Workload } from "../../src/workload/plan.ts";
import { DEFAULTS, type RequestShape, sampleCdf, shapes, type SyntheticSpec, zipfCdf } from "../../src/workload/workloads.ts";

const take = <T>(it: Iterator<T>, n: number): T[] => Array.from({ length: n }, () => it.next().value as T);
const small: SyntheticSpec[] = [
  { ...DEFAULTS["doc-qa"], documents: 3, doc_tokens: 200, system_tokens: 100, users: 10 },
  { ...DEFAULTS["multi-turn"], sessions: 3, turns: 4, system_tokens: 20, user_tokens: 10, output: 8 },
  { ...DEFAULTS.rag, chunks: 1000, chunk_tokens: 40 },
  { ...DEFAULTS["hot-prefix"], prefixes: 20, prefix_tokens: 100, suffix_tokens: 10 },
  { ...DEFAULTS.fixed, input: 64, output: 16 },
  { ...DEFAULTS.mixed, documents: 3, doc_tokens: 200, short_tokens: 20 },
];
const text = (r: RequestShape) => r.prompt ?? (r.messages ?? []).map((m) => `${m.role}:${m.content as string}`).join("|");
const wordCount = (s: string) => s.split(/\s+/).filter(Boolean).length;

describe("workload generators", () => {
  for (const spec of small) {
    test(`${spec.kind}: same seed → same requests and times; another seed → different`, () => {
      const a = [...plan(spec, { kind: "poisson", rate: 5 }, { requests: 40, duration_s: null }, 42)];
      const b = [...plan(spec, { kind: "poisson", rate: 5 }, { requests: 40, duration_s: null }, 42)];
      const c = [...plan(spec, { kind: "poisson", rate: 5 }, { requests: 40, duration_s: null }, 43)];
      expect(a.length).toBe(40);
      expect(JSON.stringify(a)).toBe(JSON.stringify(b));
      expect(JSON.stringify(a.map(text))).not.toBe(JSON.stringify(c.map(text)));
      expect(a.map((r) => r.at_s)).not.toEqual(c.map((r) => r.at_s));
      for (const r of a) expect((r.messages === undefined) !== (r.prompt === undefined)).toBe(true);
    });
  }

  test("doc-qa: one shared system prompt, N documents, short questions", () => {
    const spec = small[0] as Extract<SyntheticSpec, { kind: "doc-qa" }>;
    const rs = take(shapes(spec, new SeededRng(1)), 200);
    const systems = new Set(rs.map((r) => r.messages![0]!.content as string));
    expect(systems.size).toBe(3);
    const heads = new Set([...systems].map((s) => s.split("\n\n")[0]));
    expect(heads.size).toBe(1); // the long system prompt is shared by all documents
    expect(wordCount([...heads][0]!)).toBeGreaterThanOrEqual(100);
    for (const r of rs) expect(wordCount(r.messages![1]!.content as string)).toBe(spec.question_tokens);
    expect(new Set(rs.map((r) => r.session)).size).toBeLessThanOrEqual(10);
  });

  test("mixed: long_percent % questions on N documents, the rest short unique chats; bounds", () => {
    const spec = small[5] as Extract<SyntheticSpec, { kind: "mixed" }>;
    const rs = take(shapes(spec, new SeededRng(3)), 400);
    const long = rs.filter((r) => r.messages!.length === 2);
    expect(long.length / rs.length).toBeGreaterThan(0.18);
    expect(long.length / rs.length).toBeLessThan(0.32);
    expect(new Set(long.map((r) => r.messages![0]!.content as string)).size).toBe(3);
    for (const r of long) expect(r.max_tokens).toBe(spec.long_output);
    const short = rs.filter((r) => r.messages!.length === 1);
    for (const r of short) expect([wordCount(r.messages![0]!.content as string), r.max_tokens]).toEqual([spec.short_tokens, spec.short_output]);
    expect(new Set(short.map((r) => r.messages![0]!.content as string)).size).toBe(short.length);
    expect(parseSyntheticWorkload("mixed:long_percent=50")).toMatchObject({ kind: "mixed", long_percent: 50 });
    expect(() => parseSyntheticWorkload("mixed:long_percent=150")).toThrow(BenchInputError);
    expect(() => parseSyntheticWorkload("mixed:short_output=0")).toThrow(BenchInputError);
  });

  test("multi-turn: each turn carries the previous turn's prompt and an answer, then a new question", () => {
    const spec = small[1] as Extract<SyntheticSpec, { kind: "multi-turn" }>;
    const rs = take(shapes(spec, new SeededRng(2)), 60);
    const bySession = new Map<string, RequestShape[]>();
    for (const r of rs) bySession.set(r.session, [...(bySession.get(r.session) ?? []), r]);
    let checked = 0;
    for (const turns of bySession.values()) {
      expect(turns.length).toBeLessThanOrEqual(spec.turns);
      for (let i = 1; i < turns.length; i++) {
        const prev = turns[i - 1]!.messages!;
        const cur = turns[i]!.messages!;
        expect(cur.slice(0, prev.length)).toEqual(prev);
        expect(cur.length).toBe(prev.length + 2);
        expect(cur[prev.length]!.role).toBe("assistant");
        expect(wordCount(cur[prev.length]!.content as string)).toBe(spec.output);
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(30);
  });

  test("rag: requests begin differently (no shared system prompt)", () => {
    const rs = take(shapes(small[2]!, new SeededRng(3)), 100);
    for (const r of rs) expect(r.messages!.length).toBe(1);
    const starts = new Set(rs.map((r) => (r.messages![0]!.content as string).split(" ").slice(0, 16).join(" ")));
    expect(starts.size).toBeGreaterThan(85); // 1000 chunks, 100 draws: ≈ 95 distinct first chunks expected
    expect(new Set(rs.map((r) => r.session)).size).toBe(100);
  });

  test("hot-prefix: Zipf skew — the hottest prefix is far more frequent than the median one", () => {
    const rs = take(shapes(small[3]!, new SeededRng(4)), 4000);
    const counts = new Map<string, number>();
    for (const r of rs) counts.set(r.messages![0]!.content as string, (counts.get(r.messages![0]!.content as string) ?? 0) + 1);
    const sorted = [...counts.values()].sort((a, b) => b - a);
    expect(sorted[0]! / 4000).toBeGreaterThan(0.2); // Zipf(1.1) over 20: p(1) ≈ 0.28
    expect(sorted[0]!).toBeGreaterThan(5 * sorted[Math.floor(sorted.length / 2)]!);
  });

  test("fixed: exact word counts, completions prompt by default, chat with api=chat", () => {
    const rs = take(shapes(small[4]!, new SeededRng(5)), 20);
    for (const r of rs) {
      expect(wordCount(r.prompt!)).toBe(64);
      expect(r.max_tokens).toBe(16);
    }
    const chat = take(shapes(parseSyntheticWorkload("fixed:input=10,api=chat"), new SeededRng(5)), 2);
    expect(wordCount(chat[0]!.messages![0]!.content as string)).toBe(10);
  });

  test("zipf sampling: cdf ends at 1 and sampleCdf finds the right bucket", () => {
    const cdf = zipfCdf(4, 1);
    expect(cdf[3]).toBeCloseTo(1, 12);
    expect(sampleCdf(cdf, 0)).toBe(0);
    expect(sampleCdf(cdf, cdf[0]!)).toBe(0);
    expect(sampleCdf(cdf, cdf[0]! + 1e-9)).toBe(1);
    expect(sampleCdf(cdf, 0.999999)).toBe(3);
  });
});

describe("plan: arrivals and limits", () => {
  test("Poisson: first at 0, mean gap ≈ 1/rate, duration bound respected", () => {
    const rs = [...plan(DEFAULTS.fixed, { kind: "poisson", rate: 50 }, { requests: null, duration_s: 40 }, 9)];
    expect(rs[0]!.at_s).toBe(0);
    for (let i = 1; i < rs.length; i++) expect(rs[i]!.at_s).toBeGreaterThanOrEqual(rs[i - 1]!.at_s);
    expect(rs.at(-1)!.at_s).toBeLessThan(40);
    expect(Math.abs(rs.length - 2000) / 2000).toBeLessThan(0.06); // 2000 ± 3σ (σ ≈ 45)
  });

  test("closed loop: at_s = 0; recorded: the trace's times", () => {
    expect([...plan(DEFAULTS.fixed, { kind: "closed" }, { requests: 3, duration_s: null }, 1)].map((r) => r.at_s)).toEqual([0, 0, 0]);
    const trace: Workload = { kind: "trace", file: "t", requests: [{ at_s: 0.5, session: "a", prompt: "x", max_tokens: 1 }, { at_s: 2, session: "b", prompt: "y", max_tokens: 1 }] };
    expect([...plan(trace, { kind: "recorded" }, { requests: null, duration_s: null }, 1)].map((r) => r.at_s)).toEqual([0.5, 2]);
    expect([...plan(trace, { kind: "recorded" }, { requests: null, duration_s: 1 }, 1)].length).toBe(1);
    expect(() => [...plan(DEFAULTS.fixed, { kind: "recorded" }, { requests: 1, duration_s: null }, 1)]).toThrow(BenchInputError);
  });

  test("workload options parse; bad ones are typed errors", () => {
    expect(parseSyntheticWorkload("doc-qa:documents=8,doc-tokens=100")).toMatchObject({ kind: "doc-qa", documents: 8, doc_tokens: 100 });
    expect(parseSyntheticWorkload("hot-prefix:zipf=0.8")).toMatchObject({ zipf: 0.8 });
    for (const bad of ["nope", "doc-qa:bogus=1", "doc-qa:documents=x", "doc-qa:documents=1.5", "doc-qa:documents=0", "fixed:api=grpc", "fixed:kind=rag"])
      expect(() => parseSyntheticWorkload(bad)).toThrow(BenchInputError);
  });
});
