// The scheduler's fast-forward (SchedulerConfig.fastForward, src/engine/sim/fast-forward.ts) gives
// the same results as stepping one timer at a time: on seeded workloads with chunked prefill,
// shared prefixes (cache hits), a KV pool small enough to preempt, a full batch (max_num_seqs),
// requests stopping at EOS, aborts and blocks taken and given back from outside, every request's
// token times, finish info, the KV event batches and the counters are identical — while the
// fast-forwarded run fires far fewer timers.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../../src/core/clock.ts";
import { SeededRng } from "../../../src/core/rng.ts";
import type { KvEvent } from "../../../src/engine/sim/blocks.ts";
import { DEFAULT_COST } from "../../../src/engine/sim/cost.ts";
import { type FinishInfo, type SchedulerConfig, SimScheduler } from "../../../src/engine/sim/scheduler.ts";

interface Workload {
  requests: { atMs: number; prompt: number[]; maxTokens: number; eosAt: number | null }[];
  aborts: { atMs: number; index: number }[];
  /** Blocks taken from outside at atMs (as a P/D decode reserves them), given back holdMs later. */
  reserves: { atMs: number; blocks: number; holdMs: number }[];
}

function workload(seed: number, n: number): Workload {
  const rng = new SeededRng(seed);
  const docs = Array.from({ length: 4 }, (_, d) => Array.from({ length: 600 + 300 * d }, (_, i) => 10_000 * (d + 1) + i));
  const requests: Workload["requests"] = [];
  let t = 0;
  for (let i = 0; i < n; i++) {
    t += (-Math.log(1 - rng.float()) / 4) * 1000; // 4 requests/s
    // Half share a document prefix (prefix-cache hits), the rest are unique; 50..3000 tokens.
    const len = 50 + rng.int(2950);
    const prompt = rng.float() < 0.5 ? [...docs[rng.int(docs.length)]!.slice(0, len), i] : Array.from({ length: len }, (_, k) => (k === 0 ? 1_000_000 + i : 1 + ((i * 7919 + k) % 50_000)));
    const maxTokens = 2 + rng.int(300);
    requests.push({ atMs: t, prompt, maxTokens, eosAt: rng.float() < 0.2 ? rng.int(maxTokens) : null });
  }
  const aborts = Array.from({ length: Math.floor(n / 10) }, () => {
    const index = rng.int(n);
    return { atMs: requests[index]!.atMs + rng.float() * 3000, index }; // during its life, mostly
  });
  const reserves = Array.from({ length: Math.floor(n / 20) }, () => ({ atMs: rng.float() * t, blocks: 1 + rng.int(40), holdMs: 50 + rng.float() * 2000 }));
  return { requests, aborts, reserves };
}

interface Outcome {
  tokens: string[][];
  finishes: (FinishInfo | null)[];
  events: KvEvent[][];
  stats: ReturnType<SimScheduler["stats"]>;
  timers: number;
  endMs: number;
}

function run(w: Workload, over: Partial<SchedulerConfig>): Outcome {
  const clock = new VirtualClock(0);
  const cfg: SchedulerConfig = {
    blockSize: 16, numBlocks: 900, maxNumSeqs: 24, maxNumBatchedTokens: 2048, maxWaiting: 10_000, maxModelLen: 8192,
    cost: DEFAULT_COST, timeScale: 1, hashSeed: 11n, ...over,
  };
  const events: KvEvent[][] = [];
  const s = new SimScheduler(cfg, clock, (e) => events.push(e));
  const tokens: string[][] = w.requests.map(() => []);
  const finishes: (FinishInfo | null)[] = w.requests.map(() => null);
  w.requests.forEach((r, i) =>
    clock.setTimer(r.atMs, () =>
      s.submit({
        id: `r${i}`, promptTokens: r.prompt, maxTokens: r.maxTokens, ignoreEos: r.eosAt === null,
        nextToken: (k) => ({ id: 100 + ((i * 31 + k) % 900), eos: k === r.eosAt }),
        handlers: { onToken: (id, k, at) => void tokens[i]!.push(`${k}:${id}@${at}`), onFinish: (f) => void (finishes[i] = f) },
      }),
    ),
  );
  for (const a of w.aborts) clock.setTimer(a.atMs, () => s.abort(`r${a.index}`));
  for (const r of w.reserves)
    clock.setTimer(r.atMs, () => {
      const got = s.reserveBlocks(r.blocks);
      if (got !== null) clock.setTimer(r.holdMs, () => s.releaseBlocks(got));
    });
  let timers = 0;
  while (clock.step()) timers++;
  return { tokens, finishes, events, stats: s.stats(), timers, endMs: clock.now() };
}

describe("sim scheduler fast-forward", () => {
  for (const [name, seed, over] of [
    ["chunked prefill, prefix hits, preemption, EOS, aborts, reserved blocks", 1, {}],
    ["another seed, a larger pool", 2, { numBlocks: 4000 }],
    ["a full batch (max_num_seqs 4) with a queue behind it", 3, { maxNumSeqs: 4 }],
    ["big blocks, time scale 3", 4, { blockSize: 64, numBlocks: 300, timeScale: 3 }],
  ] as const) {
    test(`same tokens, times, finishes and KV events: ${name}`, () => {
      const w = workload(seed, 250);
      const step = run(w, over);
      const fast = run(w, { ...over, fastForward: true });
      expect(step.stats.preemptions + step.stats.prefixHits).toBeGreaterThan(0);
      expect(fast.tokens).toEqual(step.tokens);
      expect(fast.finishes).toEqual(step.finishes);
      expect(fast.events).toEqual(step.events);
      expect(fast.stats).toEqual(step.stats);
      expect(fast.endMs).toBe(step.endMs);
      expect(step.finishes.every((f) => f !== null)).toBe(true);
      // Fewer timers (a request that may stop at EOS ends windows, so mixed batches gain less).
      expect(fast.timers).toBeLessThan(step.timers);
    });
  }

  test("decode-heavy (the planner day's shape: long outputs, ignore_eos): identical, most steps without a timer", () => {
    const w = workload(6, 150);
    for (const r of w.requests) {
      r.eosAt = null;
      r.maxTokens = 256 + (r.maxTokens % 64);
    }
    const step = run(w, { numBlocks: 3000 });
    const fast = run(w, { numBlocks: 3000, fastForward: true });
    expect(fast.tokens).toEqual(step.tokens);
    expect(fast.finishes).toEqual(step.finishes);
    expect(fast.events).toEqual(step.events);
    expect(fast.stats).toEqual(step.stats);
    expect(fast.timers * 4).toBeLessThan(step.timers);
  });

  test("the first case exercises what it claims (preemption, hits, aborts, EOS stops)", () => {
    const w = workload(1, 250);
    const r = run(w, {});
    expect(r.stats.preemptions).toBeGreaterThan(0);
    expect(r.stats.prefixHits).toBeGreaterThan(0);
    expect(r.finishes.some((f) => f?.reason === "abort")).toBe(true);
    expect(r.finishes.some((f) => f?.reason === "stop")).toBe(true);
  });

  test("no KV events built when asked (kvEvents false): same timing", () => {
    const w = workload(5, 120);
    const a = run(w, { fastForward: true });
    const b = run(w, { fastForward: true, kvEvents: false });
    expect(b.events).toEqual([]);
    expect(b.finishes).toEqual(a.finishes);
  });

  test("a callback of a quiet step that aborts its request fails loudly", () => {
    const clock = new VirtualClock(0);
    const s = new SimScheduler({ blockSize: 16, numBlocks: 100, maxNumSeqs: 4, maxNumBatchedTokens: 512, maxWaiting: 10, maxModelLen: 1024, cost: DEFAULT_COST, timeScale: 1, hashSeed: 1n, fastForward: true }, clock);
    s.submit({ id: "a", promptTokens: [1, 2, 3], maxTokens: 50, ignoreEos: true, nextToken: () => ({ id: 5, eos: false }), handlers: { onToken: (_t, k) => void (k === 10 && s.abort("a")), onFinish() {} } });
    expect(() => {
      while (clock.step()) {}
    }).toThrow(/fast-forward/);
  });
});
