// Load accounting between scrapes (found by bench/routing-quality.ts): the registry stamps herd's own
// in-flight count at each scrape, so a scrape that is up to one interval old no longer counts herd's
// requests that finished since as load, while traffic herd did not send still counts.
import { describe, expect, test } from "bun:test";
import { SeededRng } from "../../src/core/rng.ts";
import { WorkerRegistry } from "../../src/cluster/registry.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { effectiveLoad, outsideRequests } from "../../src/router/load.ts";
import { kv } from "../../src/router/policies/kv.ts";
import { NO_LOAD } from "../../src/router/pipeline/runner.ts";
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
