// One conformance suite over every pipeline stage in the registries (filters, scorers, pickers)
// and every cache source: the contracts the runner relies on (pipeline/types.ts). Costs are
// finite, a picker returns a valid row, stages are deterministic for a seed, and deciding without
// committing (what explain does) leaves a stage's state untouched. The same properties for whole
// presets are in conformance.test.ts.
import { describe, expect, test } from "bun:test";
import { PIPELINE_FILTERS, PIPELINE_PICKERS, PIPELINE_SCORERS } from "../../src/config/types.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { BASE_FILTERS } from "../../src/router/pipeline/filters.ts";
import { FILTERS, PICKERS, SCORERS } from "../../src/router/pipeline/registry.ts";
import { gatherFacts, NO_LOAD } from "../../src/router/pipeline/runner.ts";
import { kvSource, prefixSource } from "../../src/router/pipeline/sources.ts";
import type { CacheSource, Filter, Picker, RequestFacts, Row, Scorer } from "../../src/router/pipeline/types.ts";
import { loadTerms } from "../../src/router/load.ts";
import { PrefixMemory } from "../../src/router/prefix-memory.ts";
import { approxSource } from "../../src/router/pipeline/llm-d.ts";
import { PrefixTrie, trieSource } from "../../src/router/policies/prefixaware.ts";
import type { Worker } from "../../src/workers/worker.ts";
import { req, routerConfig, worker } from "./fixtures.ts";

const cfg = routerConfig({ kv: { ...routerConfig().kv, temperature: 0.5 } });

function fleet(seed: number): Worker[] {
  const rng = new SeededRng(seed);
  return Array.from({ length: 1 + rng.int(9) }, (_, i) =>
    worker(`w${i}`, {
      role: rng.int(6) === 0 ? "decode" : "aggregated",
      load: { in_flight: rng.int(40), running: rng.int(3) === 0 ? null : rng.int(50), waiting: rng.int(10), kv_usage: rng.float() },
    }),
  );
}

/** Requests with sessions and prompts that share prefixes (8 documents), some without hashes. */
function requests(n: number, seed: number) {
  const rng = new SeededRng(seed);
  return Array.from({ length: n }, () => {
    const doc = BigInt(rng.int(8));
    const blocks = rng.int(4) === 0 ? 0 : 1 + rng.int(40);
    const blockHashes = Array.from({ length: blocks }, (_, i) => (doc << 32n) + BigInt(i));
    return req({ sessionId: rng.int(3) === 0 ? null : `s${rng.int(20)}`, promptTokens: blocks * 16 + rng.int(16), blockHashes, blockSize: 16 });
  });
}

const facts = (r: ReturnType<typeof req>, source?: CacheSource, nowMs = 0): RequestFacts => gatherFacts(r, nowMs, NO_LOAD, true, source);

function rowsFor(ws: readonly Worker[], f: RequestFacts, scorers: readonly Scorer[]): Row[] {
  return ws.map((w) => {
    let cost = 0;
    const terms = { ...loadTerms(w) };
    for (const s of scorers) {
      const r = s.score(w, f);
      cost += r.cost;
      Object.assign(terms, r.terms);
    }
    return { worker: w, cost, terms };
  });
}

const filters: [string, () => Filter][] = [
  ...PIPELINE_FILTERS.map((n) => [`pipeline ${n}`, () => FILTERS[n](cfg.pipeline)] as [string, () => Filter]),
  ...BASE_FILTERS.map((f) => [`base ${f.type}`, () => f] as [string, () => Filter]),
];

describe.each(filters)("filter %s", (_n, make) => {
  test("keeps a subset of the candidates, deterministically, and declares its needs", () => {
    for (let seed = 1; seed <= 30; seed++) {
      const ws = fleet(seed);
      const f = make();
      expect(typeof f.needs).toBe("object");
      for (const r of requests(10, seed)) {
        const keep = f.keep(ws, facts(r));
        for (const id of keep) expect(ws.map((w) => w.id)).toContain(id);
        expect([...make().keep(ws, facts(r))]).toEqual([...keep]);
      }
    }
  });
});

describe.each(PIPELINE_SCORERS.map((n) => [n] as const))("scorer %s", (name) => {
  test("finite costs with named terms for every worker; deterministic; scoring without commit changes nothing", () => {
    for (let seed = 1; seed <= 30; seed++) {
      const ws = fleet(seed);
      const a = SCORERS[name](cfg);
      const b = SCORERS[name](cfg);
      for (const r of requests(20, seed)) {
        const f = facts(r);
        for (const w of ws) {
          const s = a.score(w, f);
          expect(Number.isFinite(s.cost)).toBe(true);
          expect(Object.keys(s.terms).length).toBeGreaterThan(0);
          a.score(w, f); // an explain: no commit
          expect(b.score(w, f)).toEqual(s);
        }
        a.commit?.(ws[0]!, f);
        b.commit?.(ws[0]!, f);
        if (a.explain) expect(a.explain(rowsFor(ws, f, [a])[0]!.terms, f).length).toBeGreaterThan(0);
      }
    }
  });
});

describe.each(PIPELINE_PICKERS.map((n) => [n] as const))("picker %s", (name) => {
  const load = SCORERS.load(cfg);
  test("returns a valid row and a reason, for every fleet and request", () => {
    for (let seed = 1; seed <= 30; seed++) {
      const ws = fleet(seed);
      const p = PICKERS[name](cfg);
      const rng = new SeededRng(seed);
      for (const r of requests(20, seed)) {
        const f = facts(r);
        const { index, reason } = p.pick(rowsFor(ws, f, [load]), f, rng);
        expect(Number.isInteger(index) && index >= 0 && index < ws.length).toBe(true);
        expect(reason.length).toBeGreaterThan(0);
        p.commit?.(ws[index]!, f);
      }
    }
  });

  test("deterministic for a seed, and picking without commit (explain, its own Rng) leaves its state alone", () => {
    const run = (p: Picker, explainFirst: boolean) => {
      const rng = new SeededRng(5);
      const explainRng = new SeededRng(99);
      const ws = fleet(3);
      return requests(60, 4).map((r) => {
        const f = facts(r);
        if (explainFirst) p.pick(rowsFor(ws, f, [load]), f, explainRng);
        const i = p.pick(rowsFor(ws, f, [load]), f, rng).index;
        p.commit?.(ws[i]!, f);
        return i;
      });
    };
    expect(run(PICKERS[name](cfg), true)).toEqual(run(PICKERS[name](cfg), false));
  });
});

const sources: [string, () => CacheSource][] = [
  ["kv-index", () => kvSource(new BlockIndex(), new PrefixMemory(2000, 4096))],
  ["kv-index without predictions", () => kvSource(new BlockIndex(), null)],
  ["prefix-memory", () => prefixSource(new PrefixMemory(120_000, 4096))],
  ["approx-prefix (llm-d)", () => approxSource(4096)],
  ["approx-prefix, small LRU", () => approxSource(8)],
  ["prefix-trie (production-stack)", () => trieSource(new PrefixTrie(4096))],
  ["prefix-trie, few nodes", () => trieSource(new PrefixTrie(5))],
];

describe.each(sources)("cache source %s", (_n, make) => {
  test("overlap never exceeds the prompt; matching without commit changes nothing; deterministic", () => {
    const a = make();
    const b = make();
    expect(a.needs.blockHashes).toBe(true);
    const ws = fleet(8);
    let now = 0;
    for (const r of requests(200, 6)) {
      now += 7;
      const fa = facts(r, a, now);
      facts(r, a, now); // an explain
      const fb = facts(r, b, now);
      expect([...fa.overlap]).toEqual([...fb.overlap]);
      for (const o of fa.overlap.values()) expect(o.gpu).toBeLessThanOrEqual(fa.hashes.length);
      const w = ws[(r.promptTokens >> 4) % ws.length]!;
      a.commit?.(w, fa);
      b.commit?.(w, fb);
    }
  });
});
