// The P/D legs' presets (src/router/policies/pd-legs.ts): each leg of a P/D request is one routing
// decision over the router's own leases and KV index, by its router.pd pipeline, explained stage by
// stage. pd-prefill: overlap + prefill load (kv-cost, cheapest); pd-decode: KV headroom guard, then
// decode load (decode-load, lightest).
import { describe, expect, test } from "bun:test";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { Router } from "../../src/router/index.ts";
import { VirtualClock } from "../../src/core/clock.ts";
import { registryWith, req, routerConfig, worker } from "./fixtures.ts";

const HASHES = Array.from({ length: 100 }, (_, i) => BigInt(1000 + i)); // 100 blocks of 16
const prompt = { promptTokens: 1600, blockSize: 16, blockHashes: HASHES };

function router(ws: ReturnType<typeof worker>[], over: Parameters<typeof routerConfig>[0] = {}, index = new BlockIndex()) {
  return new Router({ config: routerConfig({ policy: "kv", ...over }), registry: registryWith(ws), clock: new VirtualClock(), kvIndex: index });
}

describe("pd-prefill", () => {
  test("a prefill worker holding the prompt's prefix beats an idle one; load turns it again; only prefill workers are candidates", () => {
    const index = new BlockIndex();
    index.apply("warm", { kind: "stored", medium: "gpu", hashes: HASHES.slice(0, 90) });
    const ws = [worker("idle", { role: "prefill" }), worker("warm", { role: "prefill" }), worker("dec", { role: "decode" })];
    const r = router(ws, {}, index);
    const d = r.explain(req({ ...prompt, leg: "prefill" })).decision;
    expect(d.policy).toBe("pd-prefill");
    expect(d.chosen).toBe("warm");
    expect(d.candidates.map((c) => c.worker)).toEqual(["idle", "warm"]);
    expect(d.filtered).toEqual([{ worker: "dec", node: "n1", filter: "role" }]);
    expect(d.candidates.find((c) => c.worker === "warm")!.terms).toMatchObject({ overlap_gpu: 90, prefill_blocks: 10 });
    // Ten prompts waiting on the warm worker outside herd: its prefill load outweighs the overlap.
    const swamped = router([ws[0]!, worker("warm", { role: "prefill", load: { running: 0, waiting: 10, in_flight_at_scrape: 0 } })], {}, index);
    expect(swamped.explain(req({ ...prompt, leg: "prefill" })).decision.chosen).toBe("idle");
    expect(r.explain(req({ ...prompt, leg: "prefill", exclude: new Set(["warm"]) })).decision.chosen).toBe("idle");
  });
});

describe("pd-decode", () => {
  test("the least decode load among workers with KV headroom; with room nowhere the guard steps aside; aggregated workers only when asked", () => {
    const full = worker("full", { role: "decode", load: { kv_usage: 0.99 } });
    const busy = worker("busy", { role: "decode", load: { kv_usage: 0.5, running: 4, waiting: 0, in_flight_at_scrape: 0 } });
    const agg = worker("agg", { role: "aggregated" });
    const r = router([full, busy, agg]);
    const d = r.explain(req({ ...prompt, leg: "decode" })).decision;
    expect(d.policy).toBe("pd-decode");
    expect(d.chosen).toBe("busy");
    expect(d.candidates.find((c) => c.worker === "full")!.terms).toEqual(expect.objectContaining({ filtered_by: "kv-headroom" }));
    expect(d.candidates.find((c) => c.worker === "busy")!.terms).toMatchObject({ active_blocks: 400, new_blocks: 100, decode_blocks: 500 });
    expect(router([full]).explain(req({ ...prompt, leg: "decode" })).decision).toMatchObject({ chosen: "full", reason: expect.stringContaining("kv-headroom skipped") });
    expect(r.explain(req({ ...prompt, leg: "decode", role: ["decode", "aggregated"] })).decision.chosen).toBe("agg");
  });

  test("router.pd.decode recomposes the leg in YAML like router.pipeline; the main policy is untouched", () => {
    const pd = routerConfig().pd;
    const r = router([worker("a", { role: "decode" }), worker("b", { role: "decode" }), worker("c")], { pd: { ...pd, decode: { ...pd.decode, filters: [], scorers: [], picker: "round-robin" } } });
    const picks = [0, 1, 2].map(() => r.route(req({ leg: "decode" })).decision);
    expect(picks.map((p) => p.chosen)).toEqual(["a", "b", "a"]);
    expect(picks[0]!.reason).toContain("turn 0 of the cycle over 2 workers");
    expect(r.route(req()).decision).toMatchObject({ policy: "kv", chosen: "c" });
  });
});
