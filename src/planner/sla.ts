// SLA mode (planner.slo, pure): a pool's demand in engines from the capacity model at the latency
// targets and the predicted load — Dynamo's throughput-based SLA planner (ai-dynamo/dynamo
// docs/pages/design-docs/planner-design.md "Scaling Algorithm"), on herd's signals and without
// Kubernetes: decide() still applies every rule of its own (up at once, down one at a time after
// the down window, idle sleep, floors, pins, GPU budget, fenced actuation); only the demand changes.
//
// Per tick, for a pool:
//  1. Predict (predict.ts, Holt) the request rate, ISL and OSL `horizonMs` ahead from the windows.
//  2. Correct (bounded, smoothed): measured mean TTFT / the model's expected TTFT at the load each
//     ready engine carried in the window, and the same for ITL (its concurrency by Little's law,
//     rate × OSL × ITL); each an EWMA of the log ratio, clamped to [1/max, max] (a ratio of 2 and
//     of ½ weigh alike), a window weighing by its count of finished requests. Dynamo recomputes the ratio each interval and applies min(1, ·) to the
//     prefill load; herd smooths it and applies it both ways, bounded.
//  3. Prefill engines = predicted prompt tokens/s × TTFT correction ÷ one engine's prompt tokens/s
//     with the mean TTFT at the target for the predicted ISL (capacity.ts).
//     Decode engines = predicted decode tokens/s ÷ one engine's decode tokens/s at the largest batch
//     whose ITL meets target ÷ ITL correction at context ISL + OSL/2.
//     A prefill pool is the first, a decode pool the second, an aggregated pool the tighter (larger)
//     of the two — where an aggregated engine's prefill chunks share its steps: a decoding sequence
//     waits for them, so with a share u of the engine's time on prompts (load ÷ n engines ÷ most
//     tokens/s) its ITL is the decode step's ÷ (1 − u), and the decode side needs the n that meets
//     target × (1 − u(n)) (bisection over n; the ITL expectation of the correction reads the same).
//  4. Held prompt tokens add what clears them within HELD_DRAIN_S; a held request needs one engine.
// The raw window (no forecast) gives the panic demand decide() reads for a sudden burst.
// A target no engine count can meet (below a lone prompt's TTFT, or one sequence's step) sizes that
// phase at INFEASIBLE_UTILIZATION of the saturated throughput, and says so.
import { decodeCapacity, expectedTtftMs, itlMs, maxPrefillTokensPerS, prefillCapacity, type EngineFigures } from "./capacity.ts";
import { HELD_DRAIN_S } from "./demand.ts";
import { holtForecast, holtUpdate, type Holt } from "./predict.ts";
import type { PoolSignals, PoolSpec, SloSpec } from "./types.ts";

export interface SlaMemory {
  rate: Holt | null;
  isl: Holt | null;
  osl: Holt | null;
  /** ln of the TTFT and ITL correction factors (0 = the model as is). */
  ttftLog: number;
  itlLog: number;
}

export const EMPTY_SLA: SlaMemory = { rate: null, isl: null, osl: null, ttftLog: 0, itlLog: 0 };

/** Finished requests in a window that weigh as one full EWMA step of the correction. */
export const CORRECTION_SAMPLES = 100;

/** Share of a phase's saturated throughput planned for when its target is out of reach. */
export const INFEASIBLE_UTILIZATION = 0.8;

export interface SlaDemand {
  /** Engines needed for the predicted load (fractional). */
  demand: number;
  /** Engines needed for this window's load, no forecast (decide()'s panic demand). */
  panic: number;
  terms: Record<string, number | null>;
  explain: string;
  memory: SlaMemory;
}

const r3 = (x: number) => Math.round(x * 1000) / 1000;
const fmt = (x: number) => (!Number.isFinite(x) ? String(x) : Math.abs(x) >= 10_000 ? `${(x / 1000).toFixed(1)}k` : Math.abs(x) >= 100 ? x.toFixed(0) : Math.abs(x) >= 10 ? x.toFixed(1) : x.toFixed(2));

/** One correction step: the new ln factor from ln(measured / expected), bounded and smoothed. */
export function correctionStep(prevLog: number, measuredMs: number, expectedMs: number, slo: Pick<SloSpec, "correctionEwma" | "correctionMax">, samples = CORRECTION_SAMPLES): number {
  if (!(slo.correctionEwma > 0) || !(measuredMs > 0) || !(expectedMs > 0) || !Number.isFinite(measuredMs) || !Number.isFinite(expectedMs) || !(samples > 0)) return prevLog;
  const bound = Math.log(Math.max(1, slo.correctionMax));
  const x = Math.max(-bound, Math.min(bound, Math.log(measuredMs / expectedMs)));
  // A window of n requests weighs as n / CORRECTION_SAMPLES windows of the EWMA's weight (a quiet
  // window's mean is noise; a busy one's is not yet the whole truth).
  const w = 1 - Math.pow(1 - Math.min(1, slo.correctionEwma), Math.min(samples, 10 * CORRECTION_SAMPLES) / CORRECTION_SAMPLES);
  const next = (1 - w) * prevLog + w * x;
  return Math.max(-bound, Math.min(bound, next));
}

/** SLA-mode demand of `pool` at `nowMs` (see the header); `ready` = its ready engines in the window. */
export function slaDemand(nowMs: number, pool: PoolSpec, s: PoolSignals, slo: SloSpec, ready: number, fig: EngineFigures, prev: SlaMemory = EMPTY_SLA): SlaDemand {
  // 1. The window and the forecast.
  const rateNow = s.arrivalsPerS;
  const islNow = rateNow > 0 ? s.uncachedPrefillTokensPerS / rateNow : NaN;
  const oslNow = rateNow > 0 ? s.decodeTokensPerS / rateNow : NaN;
  const mem: SlaMemory = { ...prev, rate: holtUpdate(prev.rate, rateNow, nowMs), isl: holtUpdate(prev.isl, islNow, nowMs), osl: holtUpdate(prev.osl, oslNow, nowMs) };
  const rate = holtForecast(mem.rate, slo.horizonMs);
  // ISL and OSL: their smoothed level (a mix's mean drifts slowly; the rate carries the trend).
  const isl = Math.max(1, mem.isl?.level ?? (islNow || 1));
  const osl = Math.max(1, mem.osl?.level ?? (oslNow || 1));
  const ctx = isl + osl / 2;
  const doesPrefill = pool.role !== "decode";
  const doesDecode = pool.role !== "prefill";

  // 2. Corrections from what the ready engines did in the window.
  let expectedTtft: number | null = null;
  let expectedItl: number | null = null;
  if (ready > 0 && rateNow > 0) {
    if (doesPrefill && Number.isFinite(s.ttftMsMean)) {
      const e = expectedTtftMs(fig, islNow, s.uncachedPrefillTokensPerS / ready);
      if (Number.isFinite(e)) {
        expectedTtft = e;
        mem.ttftLog = correctionStep(prev.ttftLog, s.ttftMsMean!, e, slo, s.latencySamples ?? CORRECTION_SAMPLES);
      }
    }
    if (doesDecode && Number.isFinite(s.itlMsMean) && s.itlMsMean! > 0) {
      const batch = (s.decodeTokensPerS / ready) * (s.itlMsMean! / 1000);
      const u = doesPrefill ? Math.min(0.95, s.uncachedPrefillTokensPerS / ready / maxPrefillTokensPerS(fig, islNow)) : 0;
      expectedItl = itlMs(fig, batch, islNow + oslNow / 2) / (1 - u);
      mem.itlLog = correctionStep(prev.itlLog, s.itlMsMean!, expectedItl, slo, s.latencySamples ?? CORRECTION_SAMPLES);
    }
  }
  const cTtft = Math.exp(mem.ttftLog);
  const cItl = Math.exp(mem.itlLog);

  // 3. One engine at the targets, and the engines for the load.
  const p = prefillCapacity(fig, isl, slo.ttftMs);
  const prefillPerEngine = p.feasible ? p.tokensPerS : INFEASIBLE_UTILIZATION * p.maxTokensPerS;
  const itlTarget = slo.itlMs / cItl;
  const d = decodeCapacity(fig, ctx, itlTarget);
  const kvBatch = Math.max(1, Math.min(fig.maxNumSeqs, Math.floor(fig.kvTokens / ctx)));
  const decodePerEngine = d.feasible ? d.tokensPerS : INFEASIBLE_UTILIZATION * (kvBatch / itlMs(fig, kvBatch, ctx)) * 1000;
  const prefillLoad = (Number.isFinite(rate) ? rate : 0) * isl * cTtft;
  const decodeLoad = (Number.isFinite(rate) ? rate : 0) * osl;
  const prefillEngines = doesPrefill ? prefillLoad / Math.max(1e-9, prefillPerEngine) : 0;
  let decodeEngines = doesDecode ? decodeLoad / Math.max(1e-9, decodePerEngine) : 0;
  let promptShare = 0;
  if (doesPrefill && doesDecode && decodeLoad > 0) {
    const most = maxPrefillTokensPerS(fig, isl);
    const rawPrefill = prefillLoad / cTtft;
    const need = (n: number) => {
      const u = rawPrefill / (n * most);
      if (u >= 1) return Infinity;
      const c = decodeCapacity(fig, ctx, itlTarget * (1 - u));
      return decodeLoad / (c.feasible ? c.tokensPerS : 1e-9);
    };
    // Smallest n ≥ the prompt share's own that serves the decode load at the stretched ITL.
    let lo = Math.max(decodeEngines, rawPrefill / most);
    let hi = Math.max(1, lo) * 2;
    while (need(hi) > hi && hi < 1e5) hi *= 2;
    for (let i = 0; i < 40; i++) {
      const mid = (lo + hi) / 2;
      if (need(mid) <= mid) hi = mid;
      else lo = mid;
    }
    decodeEngines = hi;
    promptShare = rawPrefill / (hi * most);
  }
  // Panic: this window's load, same capacity (no forecast, no smoothing of the mix).
  // (The aggregated decode side scales with the forecast's ratio: its interference term is not linear.)
  const decodeNow = decodeLoad > 0 ? decodeEngines * (s.decodeTokensPerS / decodeLoad) : s.decodeTokensPerS / Math.max(1e-9, decodePerEngine);
  const panicWork = Math.max(doesPrefill ? (s.uncachedPrefillTokensPerS * cTtft) / Math.max(1e-9, prefillPerEngine) : 0, doesDecode ? decodeNow : 0);

  // 4. Held requests.
  // (A P/D model's requests are held on its decode pool: their prompts are still prefill work.)
  const held = s.heldTokens / (Math.max(1e-9, prefillPerEngine) * HELD_DRAIN_S);
  const work = Math.max(prefillEngines, decodeEngines);
  let demand = work + held;
  let panic = panicWork + held;
  if (s.heldRequests > 0) {
    demand = Math.max(1, demand);
    panic = Math.max(1, panic);
  }

  const terms: Record<string, number | null> = {
    pred_rps: r3(rate), now_rps: r3(rateNow), pred_isl: r3(isl), pred_osl: r3(osl),
    ttft_correction: r3(cTtft), itl_correction: r3(cItl),
    measured_ttft_ms: Number.isFinite(s.ttftMsMean) ? r3(s.ttftMsMean!) : null, expected_ttft_ms: expectedTtft === null ? null : r3(expectedTtft),
    measured_itl_ms: Number.isFinite(s.itlMsMean) ? r3(s.itlMsMean!) : null, expected_itl_ms: expectedItl === null ? null : r3(expectedItl),
    ...(doesPrefill ? { prefill_tps_per_engine: r3(prefillPerEngine), prefill_engines: r3(prefillEngines), ttft_feasible: p.feasible ? 1 : 0 } : {}),
    ...(doesDecode ? { decode_tps_per_engine: r3(decodePerEngine), decode_batch: d.batch, decode_engines: r3(decodeEngines), itl_feasible: d.feasible ? 1 : 0 } : {}),
    ...(doesPrefill && doesDecode ? { prompt_share: r3(promptShare) } : {}),
    held_engines: r3(held),
  };
  const parts: string[] = [`predicted ${fmt(rate)} req/s in ${slo.horizonMs / 1000}s (now ${fmt(rateNow)}), ISL ${fmt(isl)}, OSL ${fmt(osl)}`];
  if (doesPrefill)
    parts.push(
      `prefill ${fmt(rate * isl)} tok/s × TTFT correction ${cTtft.toFixed(2)} ÷ ${fmt(prefillPerEngine)} tok/s per engine at TTFT ${slo.ttftMs} ms` +
        (p.feasible ? ` (ρ ${p.utilization.toFixed(2)}, idle TTFT ${fmt(p.idleTtftMs)} ms)` : ` (target below the idle TTFT ${fmt(p.idleTtftMs)} ms: sized at ${INFEASIBLE_UTILIZATION} of saturation)`) +
        ` = ${prefillEngines.toFixed(2)} engines`,
    );
  if (doesDecode)
    parts.push(
      `decode ${fmt(decodeLoad)} tok/s ÷ ${fmt(decodePerEngine)} tok/s per engine at ITL ${slo.itlMs} ms ÷ correction ${cItl.toFixed(2)} = ${fmt(itlTarget)} ms, context ${fmt(ctx)}` +
        (d.feasible ? ` (batch ${d.batch})` : ` (target below one sequence's step: sized at ${INFEASIBLE_UTILIZATION} of the KV-bound batch)`) +
        (promptShare > 0 ? `, prompts take ${(promptShare * 100).toFixed(0)}% of each engine's time (ITL ÷ ${(1 - promptShare).toFixed(2)})` : "") +
        ` = ${decodeEngines.toFixed(2)} engines`,
    );
  if (held > 0 || s.heldRequests > 0) parts.push(`held ${s.heldRequests} requests, ${fmt(s.heldTokens)} prompt tokens = ${held.toFixed(2)} engines`);
  parts.push(`${doesPrefill && doesDecode ? "aggregated: the tighter of the two" : pool.role}${held > 0 ? " + held" : ""} → ${demand.toFixed(2)} engines`);
  return { demand, panic, terms, explain: parts.join("; "), memory: mem };
}
