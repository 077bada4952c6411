// Load accounting between scrapes (found by bench/routing-quality.ts): the registry stamps herd's own
// in-flight count at each scrape, so a scrape that is up to one interval old no longer counts herd's
// requests that finished since as load, while traffic herd did not send still counts.
import { describe, expect, test } from "bun:test";
import { KV_BLOCKED_USAGE } from "../../src/router/pipeline/scorers.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { effectiveLoad, outsideRequests } from "../../src/router/load.ts";
import { kv } from "../../src/router/policies/kv.ts";
import { NO_LOAD } from "../../src/router/pipeline/runner.ts";
import { LoadBook } from "../../src/router/lease.ts";
import { req, routerConfig, worker } from "./fixtures.ts";

describe("scrape stamp", () => {
  test("the registry records herd's in-flight count at each scrape, and null when the scrape failed", () => {
    const r = new WorkerRegistry();
    r.upsert(worker("a"));
    for (let i = 0; i < 6; i++) r.addInFlight("a", 1);
    r.updateLoad("a", { running: 6, waiting: 0, scraped_at_ms: 1 });
    expect(r.get("a")!.load.in_flight_at_scrape).toBe(6);
    r.updateLoad("a", { kv_usage: 0.5 }); // not a queue figure: the stamp stays
    expect(r.get("a")!.load.in_flight_at_scrape).toBe(6);
    r.updateLoad("a", { running: null, waiting: null, kv_usage: null });
    expect(r.get("a")!.load.in_flight_at_scrape).toBeNull();
    r.updateLoad("a", { in_flight_at_scrape: 99 } as never); // only the registry stamps it
    expect(r.get("a")!.load.in_flight_at_scrape).toBeNull();
  });

  test("herd's requests that finished after the scrape stop counting; outside traffic keeps counting", () => {
    const r = new WorkerRegistry();
    r.upsert(worker("a"));
    for (let i = 0; i < 6; i++) r.addInFlight("a", 1);
    r.updateLoad("a", { running: 8, waiting: 1 }); // 6 of herd's + 3 from elsewhere
    const load = () => r.get("a")!.load;
    expect(outsideRequests(load())).toBe(3);
    expect(effectiveLoad(load())).toBe(9);
    for (let i = 0; i < 5; i++) r.addInFlight("a", -1); // five of herd's finish before the next scrape
    expect(effectiveLoad(load())).toBe(1 + 3); // was max(1, 9) = 9 when compared with the current count
    r.addInFlight("a", 1);
    r.addInFlight("a", 1);
    expect(effectiveLoad(load())).toBe(3 + 3);
  });

  test("without a stamp (figures set by hand) load stays max(in_flight, running + waiting)", () => {
    const w = worker("a", { load: { in_flight: 1, running: 4, waiting: 2 } });
    expect(effectiveLoad(w.load)).toBe(6);
    expect(outsideRequests(w.load)).toBe(5);
    expect(outsideRequests(worker("b", { load: { in_flight: 3 } }).load)).toBe(0);
  });

  test("kv-cost: a stale scrape of herd's own finished requests adds no outside blocks", () => {
    const r = new WorkerRegistry();
    r.upsert(worker("stale"));
    r.upsert(worker("other"));
    for (let i = 0; i < 4; i++) r.addInFlight("stale", 1);
    r.updateLoad("stale", { running: 4, waiting: 0 });
    r.updateLoad("other", { running: 0, waiting: 0 });
    for (let i = 0; i < 4; i++) r.addInFlight("stale", -1); // all four finished since the scrape
    const base = routerConfig();
    const policy = kv.create(routerConfig({ kv: { ...base.kv, predicted_ttl_ms: 0 }, pipeline: { ...base.pipeline, filters: [] } }), {
      kvIndex: new BlockIndex(),
      load: NO_LOAD,
    });
    const hashes = Array.from({ length: 10 }, (_, i) => BigInt(i + 1));
    const p = policy.pick(req({ promptTokens: 160, blockHashes: hashes, blockSize: 16 }), [r.get("stale")!, r.get("other")!], {
      rng: new SeededRng(1),
      nowMs: 0,
      dryRun: true,
    });
    const terms = Object.fromEntries(p.candidates.map((c) => [c.worker, c.terms]));
    expect(terms.stale).toMatchObject({ outside_requests: 0, in_flight: 0, running: 4 });
    expect(terms.stale!.cost).toBe(terms.other!.cost);
  });
});

describe("prefill progress (router.kv.prefill_load_model: progress)", () => {
  test("the rate is learned from a prompt that had the queue to itself; queued prompts are computed in dispatch order", () => {
    let now = 0;
    const r = new WorkerRegistry();
    r.upsert(worker("a"));
    const book = new LoadBook(r, () => {}, () => now);
    const first = book.book("a", 1000);
    expect(book.prefillRemaining("a")).toEqual({ requests: 1, tokens: 1000 }); // no rate yet: in full
    now = 50;
    first.firstToken(); // 1000 tokens in 50 ms → 20 tokens/ms
    expect(book.prefillRate("a")).toBe(20);
    const b1 = book.book("a", 600); // t = 50
    now = 60;
    const b2 = book.book("a", 600); // t = 60, queued behind b1 (its sample will not count)
    now = 80; // 30 ms since b1: 600 tokens done → b1 finished, b2 untouched
    expect(book.prefillRemaining("a")).toEqual({ requests: 2, tokens: 600 });
    expect(book.prefillOf("a")).toEqual({ requests: 2, tokens: 1200 });
    now = 90; // 40 ms: 800 done → b2 has 400 left
    expect(book.prefillRemaining("a")).toEqual({ requests: 2, tokens: 400 });
    now = 200;
    expect(book.prefillRemaining("a").tokens).toBe(0);
    b1.firstToken(); // b1 had the queue to itself: 600 tokens / 150 ms = 4 tokens/ms, EWMA 0.1
    b2.firstToken(); // b2 was queued behind b1: no sample
    expect(book.prefillRate("a")).toBeCloseTo(20 + 0.1 * (4 - 20), 9);
    expect(book.prefillRemaining("a")).toEqual({ requests: 0, tokens: 0 });
  });

  test("prompts the engine reports waiting (the newest ones) make no progress: they are queued for KV, not computing", () => {
    let now = 0;
    const r = new WorkerRegistry();
    r.upsert(worker("a"));
    const book = new LoadBook(r, () => {}, () => now);
    const first = book.book("a", 1000);
    now = 50;
    first.firstToken(); // 20 tokens/ms
    book.book("a", 600); // t = 50
    book.book("a", 600); // t = 50
    now = 200; // 3000 tokens of budget: both done if both computed
    expect(book.prefillRemaining("a")).toEqual({ requests: 2, tokens: 0 });
    expect(book.prefillRemaining("a", 1)).toEqual({ requests: 2, tokens: 600 }); // the newest is queued
    expect(book.prefillRemaining("a", 2)).toEqual({ requests: 2, tokens: 1200 });
    expect(book.prefillRemaining("a", 9)).toEqual({ requests: 2, tokens: 1200 }); // outside traffic too: capped
  });
});

describe("kv-cost with prefill progress", () => {
  const hashes = Array.from({ length: 10 }, (_, i) => BigInt(i + 100));
  // Both workers have one 1600-token prompt prefilling; A's is nearly done, B's just started.
  const load = {
    ...NO_LOAD,
    prefilling: () => ({ requests: 1, tokens: 1600 }),
    prefillRemaining: (id: string) => ({ requests: 1, tokens: id === "A" ? 160 : 1600 }),
  };
  const pick = (model: "none" | "progress", worker0 = "A") => {
    const base = routerConfig();
    const policy = kv.create(
      routerConfig({ kv: { ...base.kv, prefill_load_scale: 8, prefill_load_model: model, predicted_ttl_ms: 0 }, pipeline: { ...base.pipeline, filters: [] } }),
      { kvIndex: new BlockIndex(), load },
    );
    const ws = worker0 === "A" ? [worker("A"), worker("B")] : [worker("B"), worker("A")];
    return policy.pick(req({ promptTokens: 160, blockHashes: hashes, blockSize: 16 }), ws, { rng: new SeededRng(3), nowMs: 0, dryRun: true });
  };
  test("progress: the worker about to finish its prefill is cheaper, by the scaled tokens it has left", () => {
    for (const order of ["A", "B"]) {
      const p = pick("progress", order);
      expect(p.chosen).toBe("A");
      const t = Object.fromEntries(p.candidates.map((c) => [c.worker, c.terms]));
      expect(t.A).toMatchObject({ active_prefill_tokens: 160 });
      expect(t.B).toMatchObject({ active_prefill_tokens: 1600 });
      expect((t.B!.cost as number) - (t.A!.cost as number)).toBeCloseTo((8 * (1600 - 160)) / 16, 6);
    }
  });
  test("none (Dynamo): both count the full prompt, equal cost", () => {
    const t = Object.fromEntries(pick("none").candidates.map((c) => [c.worker, c.terms]));
    expect(t.A!.cost).toBe(t.B!.cost);
    expect(t.A).toMatchObject({ active_prefill_tokens: 1600 });
  });
  test("progress: the engine's waiting requests are passed on as queued for KV only when its KV is nearly full", () => {
    const asked: number[] = [];
    const spy = { ...NO_LOAD, prefillRemaining: (_id: string, waiting = 0) => (asked.push(waiting), { requests: 1, tokens: 0 }) };
    const base = routerConfig();
    const policy = kv.create(routerConfig({ kv: { ...base.kv, predicted_ttl_ms: 0 }, pipeline: { ...base.pipeline, filters: [] } }), { kvIndex: new BlockIndex(), load: spy });
    const ws = [worker("A", { load: { running: 1, waiting: 2, kv_usage: KV_BLOCKED_USAGE } }), worker("B", { load: { running: 1, waiting: 2, kv_usage: 0.5 } })];
    policy.pick(req({ promptTokens: 160, blockHashes: hashes, blockSize: 16 }), ws, { rng: new SeededRng(3), nowMs: 0, dryRun: true });
    expect(asked).toEqual([2, 0]);
  });
});
