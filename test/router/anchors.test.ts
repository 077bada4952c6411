// The emulated anchors on small hand-made states: llm-d's Optimized Baseline stages
// (src/router/pipeline/llm-d.ts, run by the `approx` policy) and production-stack's prefixaware
// (src/router/policies/prefixaware.ts). Each expectation is what the upstream algorithm decides
// (the arithmetic is written out), so a wrong weight, normalisation, match rule or tie-break fails.
import { describe, expect, test } from "bun:test";
import { SeededRng } from "../../src/core/rng.ts";
import { approxSource, LLMD_MAX_PREFIX_BLOCKS, noHitLruScorer, queueScorer } from "../../src/router/pipeline/llm-d.ts";
import { gatherFacts, NO_LOAD } from "../../src/router/pipeline/runner.ts";
import { OPTIMIZED_BASELINE_PIPELINE } from "../../src/router/policies/approx.ts";
import { policyFactory } from "../../src/router/policies/index.ts";
import { chunkEnds, PrefixTrie } from "../../src/router/policies/prefixaware.ts";
import type { RouterConfig } from "../../src/config/types.ts";
import type { Worker } from "../../src/workers/worker.ts";
import { req, routerConfig, worker } from "./fixtures.ts";

const ctx = (seed = 1, dryRun = false) => ({ rng: new SeededRng(seed), nowMs: 0, dryRun });
const prompt = (doc: number, blocks: number, from = 0) => Array.from({ length: blocks }, (_, i) => (BigInt(doc) << 32n) + BigInt(from + i));
const request = (hashes: bigint[]) => req({ promptTokens: hashes.length * 16, blockHashes: hashes, blockSize: 16 });

function llmd(): RouterConfig {
  const c = routerConfig({ policy: "approx" });
  c.prefix = { ...c.prefix, max_blocks_per_worker: 4096 };
  c.pipeline = {
    ...c.pipeline,
    ...structuredClone(OPTIMIZED_BASELINE_PIPELINE),
  };
  return c;
}

describe("llm-d scorers", () => {
  test("queue: (max − q) / (max − min) over the candidates; all equal → 1", () => {
    const s = queueScorer();
    const ws = [0, 5, 10].map((q, i) => worker(`w${i}`, { load: { waiting: q } }));
    const f = gatherFacts(req(), 0, NO_LOAD, false);
    expect(ws.map((w) => -s.score(w, f, ws).cost)).toEqual([1, 0.5, 0]);
    const same = [3, 3].map((q, i) => worker(`s${i}`, { load: { waiting: q } }));
    expect(same.map((w) => -s.score(w, f, same).cost)).toEqual([1, 1]);
  });

  test("approx index: first 256 blocks, stop at the first block nobody holds, LRU per worker", () => {
    const src = approxSource(4096);
    const long = prompt(1, 300);
    src.commit!(worker("w0"), gatherFacts(request(long), 0, NO_LOAD, true, src));
    expect(src.match(long, 0).overlap.get("w0")?.gpu).toBe(LLMD_MAX_PREFIX_BLOCKS);
    // Shares 100 blocks, then differs: 100 matched.
    expect(src.match([...long.slice(0, 100), ...prompt(2, 50)], 0).overlap.get("w0")?.gpu).toBe(100);
    // A small LRU forgets the oldest hashes (the head of the prompt): the walk stops at block 0.
    const small = approxSource(4);
    const six = prompt(3, 6);
    small.commit!(worker("w1"), gatherFacts(request(six), 0, NO_LOAD, true, small));
    expect(small.match(six, 0).overlap.size).toBe(0);
  });

  test("no-hit-lru: cold requests go to never-used workers first, then the least recently used", () => {
    const c = routerConfig({ policy: "approx" });
    c.pipeline = { ...c.pipeline, filters: [], scorers: [{ type: "no-hit-lru", weight: 1 }], picker: "min" };
    const p = policyFactory("approx")!.create(c);
    const ws = ["a", "b", "c"].map((id) => worker(id));
    const seq = [1, 2, 3, 4].map((d) => p.pick(request(prompt(d, 4)), ws, ctx(d)).chosen);
    expect(seq).toEqual(["a", "b", "c", "a"]);
    // A warm request (doc 1 is on a): neutral 0.5 everywhere.
    const s = noHitLruScorer();
    const f = gatherFacts(request(prompt(1, 4)), 0, NO_LOAD, true, { type: "x", needs: {}, match: () => ({ overlap: new Map([["a", { gpu: 4, cpu: 0, disk: 0 }]]), predicted: new Map() }) });
    expect(ws.map((w) => s.score(w, f, ws).cost)).toEqual([-0.5, -0.5, -0.5]);
  });

  test("Optimized Baseline: 2·queue + 2·(1 − kv) + 3·prefix + 2·no-hit, highest wins", () => {
    const doc = prompt(7, 64);
    const decide = (cached: Partial<Worker["load"]>) => {
      const p = policyFactory("approx")!.create(llmd());
      const w0 = worker("w0", { load: cached });
      const w1 = worker("w1", { load: { waiting: 0, kv_usage: 0 } });
      p.pick(request(doc), [w0], ctx()); // w0 now holds the prompt in the index
      return p.pick(request([...doc, ...prompt(8, 2)]), [w0, w1], ctx());
    };
    // w0: queue 0 (the longest), kv 1 − 0.9, prefix 64/66, warm 0.5 → 0 + 0.2 + 2.909 + 1 = 4.109;
    // w1: 2 + 2 + 0 + 1 = 5 → w1.
    const busy = decide({ waiting: 10, kv_usage: 0.9 });
    expect(busy.chosen).toBe("w1");
    expect(busy.candidates.find((c) => c.worker === "w0")!.terms.cost).toBeCloseTo(-(0.2 + (3 * 64) / 66 + 1), 3);
    // w0 with kv 0.4: 0 + 1.2 + 2.909 + 1 = 5.109 > 5 → w0 (prefix outweighs a longer queue).
    expect(decide({ waiting: 2, kv_usage: 0.4 }).chosen).toBe("w0");
  });
});

describe("prefixaware (production-stack)", () => {
  test("chunks of 2 blocks, a trailing partial chunk too", () => {
    expect(chunkEnds(5)).toEqual([1, 3, 4]);
    expect(chunkEnds(4)).toEqual([1, 3]);
    expect(chunkEnds(0)).toEqual([]);
  });

  test("longest routed prefix wins; ties are random among the matched only", () => {
    const trie = new PrefixTrie(1000);
    const shared = prompt(1, 4);
    trie.insert("w0", [...shared, ...prompt(2, 4)]);
    trie.insert("w1", [...shared, ...prompt(3, 4)]);
    const m = trie.match([...shared, ...prompt(2, 4), ...prompt(9, 2)]);
    expect(m.get("w0")).toBe(8);
    expect(m.get("w1")).toBe(4);

    const c = routerConfig({ policy: "prefixaware" });
    const ws = ["w0", "w1", "w2"].map((id) => worker(id));
    const chosen = new Set<string>();
    for (let seed = 1; seed <= 40; seed++) {
      const p = policyFactory("prefixaware")!.create(c);
      p.pick(request([...shared, ...prompt(2, 4)]), [ws[0]!], ctx(seed));
      p.pick(request([...shared, ...prompt(3, 4)]), [ws[1]!], ctx(seed));
      chosen.add(p.pick(request([...shared, ...prompt(5, 4)]), ws, ctx(seed)).chosen);
    }
    expect([...chosen].sort()).toEqual(["w0", "w1"]);
  });

  test("no load awareness: a document stays on its first worker however loaded", () => {
    const p = policyFactory("prefixaware")!.create(routerConfig({ policy: "prefixaware" }));
    const doc = prompt(4, 40);
    const idle = [worker("w0"), worker("w1"), worker("w2")];
    const first = p.pick(request([...doc, ...prompt(100, 3)]), idle, ctx(3)).chosen;
    const ws = idle.map((w) => (w.id === first ? worker(w.id, { load: { in_flight: 500, waiting: 400, kv_usage: 1 } }) : w));
    for (let q = 0; q < 10; q++) expect(p.pick(request([...doc, ...prompt(200 + q, 3)]), ws, ctx(q)).chosen).toBe(first);
  });

  test("a shared system prompt captures every later prompt on the first worker (the walk narrows to it)", () => {
    const p = policyFactory("prefixaware")!.create(routerConfig({ policy: "prefixaware" }));
    const system = prompt(1, 10);
    const ws = [worker("w0"), worker("w1"), worker("w2"), worker("w3")];
    const first = p.pick(request([...system, ...prompt(2, 6)]), ws, ctx(1)).chosen;
    // New documents behind the same system prompt: only `first` holds the system prompt's chunks,
    // so the intersection is {first} when the document's first chunk is missing.
    for (let d = 3; d < 20; d++) expect(p.pick(request([...system, ...prompt(d, 6)]), ws, ctx(d)).chosen).toBe(first);
  });

  test("bounded: at most maxNodes nodes, the deepest forgotten first", () => {
    const trie = new PrefixTrie(3);
    const path = prompt(6, 8); // 4 chunks
    trie.insert("w0", path);
    expect(trie.size).toBe(3);
    expect(trie.match(path).get("w0")).toBe(6); // 3 chunks of the 4 remain, from the root
    trie.forget("w0");
    expect(trie.size).toBe(0);
    expect(trie.match(path).size).toBe(0);
  });

  test("explain names the match and leaves the trie alone", () => {
    const p = policyFactory("prefixaware")!.create(routerConfig({ policy: "prefixaware" }));
    const ws = [worker("w0"), worker("w1")];
    const doc = prompt(5, 6);
    const dry = p.pick(request(doc), ws, ctx(1, true));
    expect(dry.reason).toContain("longest match 0 of 6 blocks");
    const live = p.pick(request(doc), ws, ctx(1)).chosen;
    const again = p.pick(request(doc), ws, ctx(2, true));
    expect(again.chosen).toBe(live);
    expect(again.reason).toContain("longest match 6 of 6 blocks");
  });
});
