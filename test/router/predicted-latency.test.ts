// The `predicted` policy: forecasts from the step-cost model, its explain terms, the SLO picker,
// the online correction (through the Router's lease on a virtual clock), and the SLO headers.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { HerdError } from "../../src/core/errors.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { DEFAULT_COST, stepCostMs, chunkPairs } from "../../src/engine/sim/cost.ts";
import { Router, SLO_HEADER_MAX_MS } from "../../src/router/router.ts";
import { Corrections, engineCost, forecast, predicted, sloOf } from "../../src/router/policies/predicted.ts";
import type { LoadView } from "../../src/router/types.ts";
import type { RouterConfig } from "../../src/config/types.ts";
import { registryWith, req, routerConfig, worker, workers } from "./fixtures.ts";

const cfg = (over: Partial<RouterConfig["predicted"]> = {}): RouterConfig => {
  const base = routerConfig({ policy: "predicted" });
  return { ...base, predicted: { ...base.predicted, ...over } };
};
const engine = engineCost(routerConfig().predicted.engine);
const ctx = { rng: new SeededRng(1), nowMs: 0, dryRun: true };

/** A LoadView where worker `busy` has `tokens` prompt tokens queued in `n` prompts. */
function queued(busy: string, tokens: number, n = 1): LoadView {
  return {
    prefilling: (id) => (id === busy ? { requests: n, tokens } : { requests: 0, tokens: 0 }),
    activeBlocks: () => 0,
    activeOverlaps: () => new Map(),
  };
}

describe("forecast (the engine's step-cost model)", () => {
  test("an idle worker: request overhead plus one prefill step of the sim's own cost", () => {
    const f = forecast(engine, { newTokens: 1000, cachedTokens: 0, queuedTokens: 0, queuedRequests: 0, decoding: 0, contextTokens: 0, ownContextTokens: 1000 });
    const step = stepCostMs(DEFAULT_COST, { tokens: 1000, prefillPairs: chunkPairs(0, 1000), decodeContextTokens: 0 });
    expect(f.steps).toBe(1);
    expect(f.ttftMs).toBeCloseTo(DEFAULT_COST.requestMs + step, 6);
    expect(f.itlMs).toBeCloseTo(stepCostMs(DEFAULT_COST, { tokens: 1, prefillPairs: 0, decodeContextTokens: 1000 }), 6);
  });

  test("queued prefill, decoding sequences and cached tokens move it the right way", () => {
    const x = { newTokens: 2000, cachedTokens: 0, queuedTokens: 0, queuedRequests: 0, decoding: 0, contextTokens: 0, ownContextTokens: 2000 };
    const idle = forecast(engine, x).ttftMs;
    expect(forecast(engine, { ...x, queuedTokens: 16_000, queuedRequests: 2 }).ttftMs).toBeGreaterThan(idle * 2);
    expect(forecast(engine, { ...x, newTokens: 100, cachedTokens: 1900 }).ttftMs).toBeLessThan(idle);
    expect(forecast(engine, { ...x, decoding: 64, contextTokens: 200_000 }).itlMs).toBeGreaterThan(forecast(engine, x).itlMs);
    // More tokens than the step budget take more steps.
    expect(forecast(engine, { ...x, newTokens: 20_000 }).steps).toBe(3);
  });
});

describe("predicted policy", () => {
  test("picks the worker without a queue and explains every term", () => {
    const p = predicted.create(cfg(), { load: queued("w0", 8000) });
    const pick = p.pick(req({ promptTokens: 500 }), workers(2), ctx);
    expect(pick.chosen).toBe("w1");
    const t0 = pick.candidates[0]!.terms;
    const t1 = pick.candidates[1]!.terms;
    for (const k of ["ttft_ms", "itl_ms", "model_ttft_ms", "correction", "queued_tokens", "decoding", "new_tokens", "cached_tokens", "steps", "headroom", "meets_slo"]) expect(t0).toHaveProperty(k);
    expect(t0.queued_tokens).toBe(8000);
    expect(t0.ttft_ms as number).toBeGreaterThan(t1.ttft_ms as number);
    expect(pick.reason).toMatch(/lowest forecast TTFT/);
    expect(pick.reason).toMatch(/forecast TTFT .* ms, ITL .* ms/);
    expect(pick.latency!.rawTtftMs).toBe(t1.model_ttft_ms as number);
  });

  test("with an SLO, the most headroom among workers that meet it; none meets → lowest TTFT", () => {
    // w1 has less queued prefill but many decoding requests: lower TTFT, worse ITL.
    const load: LoadView = {
      prefilling: (id) => (id === "w0" ? { requests: 1, tokens: 3000 } : { requests: 0, tokens: 0 }),
      activeBlocks: (id) => (id === "w1" ? 60_000 : 0),
      activeOverlaps: () => new Map(),
    };
    const ws = [worker("w0"), worker("w1", { load: { in_flight: 200 } })];
    const p = predicted.create(cfg(), { load });
    const noSlo = p.pick(req({ promptTokens: 500 }), ws, ctx);
    const [a, b] = [noSlo.candidates[0]!.terms, noSlo.candidates[1]!.terms];
    expect(noSlo.chosen).toBe((a.ttft_ms as number) < (b.ttft_ms as number) ? "w0" : "w1");
    // An ITL objective only w0 meets: w0 wins whatever the TTFTs.
    const itlSlo = Math.ceil(((a.itl_ms as number) + (b.itl_ms as number)) / 2);
    const withSlo = p.pick(req({ promptTokens: 500, sloItlMs: itlSlo }), ws, ctx);
    expect(withSlo.chosen).toBe("w0");
    expect(withSlo.candidates[0]!.terms.meets_slo).toBe(1);
    expect(withSlo.candidates[1]!.terms.meets_slo).toBe(0);
    expect(withSlo.reason).toMatch(/most SLO headroom/);
    // An objective nobody meets: the lowest forecast TTFT, said so.
    const none = p.pick(req({ promptTokens: 500, sloTtftMs: 0.001 }), ws, ctx);
    expect(none.chosen).toBe(noSlo.chosen);
    expect(none.reason).toMatch(/no worker meets the SLO/);
  });

  test("per-model defaults apply when the request sends no header; headers win", () => {
    const c = cfg({ slo: { ttft_ms: 900, itl_ms: 0 }, models: [{ model: "m", ttft_ms: 300, itl_ms: 40 }] }).predicted;
    expect(sloOf(req(), c)).toEqual({ ttftMs: 300, itlMs: 40 });
    expect(sloOf(req({ model: "other" }), c)).toEqual({ ttftMs: 900, itlMs: 0 });
    expect(sloOf(req({ sloTtftMs: 50 }), c)).toEqual({ ttftMs: 50, itlMs: 40 });
    expect(sloOf(req({ sloTtftMs: Number.NaN }), c).ttftMs).toBe(300);
  });
});

describe("online correction", () => {
  test("converges on a worker whose engine is 3× slower than the model, and the router stops preferring it", () => {
    const registry = registryWith(workers(2));
    const clock = new VirtualClock();
    const router = new Router({ config: cfg({ correction_ewma: 0.2 }), registry, clock, rng: new SeededRng(3) });
    const samples: number[] = [];
    router.observe({ latency: (s) => void samples.push(s.measuredTtftMs / s.predictedTtftMs) });
    // Route 60 requests one at a time; each worker's "engine" answers in forecast × its bias.
    const bias: Record<string, number> = { w0: 3, w1: 1 };
    const chosen: string[] = [];
    for (let i = 0; i < 60; i++) {
      // Alternate: pin half the requests to w0 so it keeps being measured.
      const r = router.routeAndBook(req({ promptTokens: 2000, ...(i % 2 === 0 ? { worker: "w0" } : {}) }));
      chosen.push(r.worker.id);
      clock.advance(r.decision.latency!.rawTtftMs * bias[r.worker.id]!);
      r.lease.firstToken();
      r.lease.release();
    }
    expect(samples.length).toBe(60);
    const explained = router.explain(req({ promptTokens: 2000 }));
    const corr = Object.fromEntries(explained.decision.candidates.map((c) => [c.worker, c.terms.correction as number]));
    expect(corr.w0).toBeGreaterThan(2.7);
    expect(corr.w0).toBeLessThan(3.3);
    expect(corr.w1).toBeCloseTo(1, 1);
    expect(explained.worker.id).toBe("w1");
    // The unpinned requests went to w1 once w0's bias was learned.
    expect(chosen.filter((w, i) => i % 2 === 1 && i > 20 && w === "w0")).toEqual([]);
  });

  test("the factor is bounded, ignores bad samples, and is dropped with the worker", () => {
    const c = new Corrections(0.5, 4);
    for (let i = 0; i < 50; i++) c.learn({ workerId: "w", predictedTtftMs: 1, measuredTtftMs: 1000 });
    expect(c.factor("w")).toBeCloseTo(4, 6);
    c.learn({ workerId: "w", predictedTtftMs: 0, measuredTtftMs: 5 });
    c.learn({ workerId: "w", predictedTtftMs: 5, measuredTtftMs: Number.NaN });
    expect(c.factor("w")).toBeCloseTo(4, 6);
    c.forget("w");
    expect(c.factor("w")).toBe(1);
    const off = new Corrections(0, 4);
    off.learn({ workerId: "w", predictedTtftMs: 1, measuredTtftMs: 3 });
    expect(off.factor("w")).toBe(1);
  });
});

describe("SLO headers", () => {
  const router = new Router({ config: cfg(), registry: registryWith(workers(1)), clock: new VirtualClock(), rng: new SeededRng(1) });
  test("parsed into the request's fields; absent ones left out", () => {
    expect(router.sloFrom(new Headers({ "x-slo-ttft-ms": "250", "x-slo-itl-ms": " 40.5 " }))).toEqual({ sloTtftMs: 250, sloItlMs: 40.5 });
    expect(router.sloFrom(new Headers({ "x-slo-itl-ms": "30" }))).toEqual({ sloItlMs: 30 });
    expect(router.sloFrom(new Headers())).toEqual({});
  });
  test("bounded: huge values are cut, bad ones are a 400", () => {
    expect(router.sloFrom(new Headers({ "x-slo-ttft-ms": "1e12" })).sloTtftMs).toBe(SLO_HEADER_MAX_MS);
    for (const bad of ["abc", "-5", "0", "", "Infinity"]) {
      let err: unknown;
      try {
        router.sloFrom(new Headers({ "x-slo-ttft-ms": bad }));
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(HerdError);
      expect((err as HerdError).status).toBe(400);
    }
  });
});
