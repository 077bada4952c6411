// How many engines a pool needs, from what herd's data path saw (pure). The unit is "engines at the
// target utilisation", fractional: a pool whose prefill tokens/s are 1.5 × what one engine does at
// the target needs 1.5 engines, so 2. Token velocity rather than request counts (TokenScale,
// arXiv 2512.03416; DistServe's per-phase sizing): a prefill pool is sized by uncached prompt
// tokens/s, a decode pool by decode tokens/s, an aggregated engine does both, so their shares add.
// Held requests are demand too (the invisible-queue failure of Dynamo #10528): any held request
// needs at least one engine, and held prompt tokens must clear within `HELD_DRAIN_S`.
import type { PoolSignals, PoolSpec } from "./types.ts";

/** Held prompt tokens should be computed within this many seconds. */
export const HELD_DRAIN_S = 10;

/** True when a signal the decision needs is missing (NaN or negative): the planner then holds. */
export function missingSignal(s: PoolSignals | undefined): boolean {
  if (!s) return true;
  return [s.arrivalsPerS, s.uncachedPrefillTokensPerS, s.decodeTokensPerS, s.heldRequests, s.heldTokens].some((x) => !Number.isFinite(x) || x < 0);
}

/** Per-engine gain of a pool of `n` engines (1 for one engine, or without a measured gain). */
export function poolingGainAt(pool: PoolSpec, n: number): number {
  const g = pool.poolingGain;
  if (!g || g.engines <= 1 || g.factor <= 0 || n <= 1) return 1;
  return Math.pow(g.factor, Math.log(n) / Math.log(g.engines));
}

/** Engines needed (fractional) at `utilization` of each engine's capacity, pooling gain included. */
export function engineDemand(pool: PoolSpec, s: PoolSignals, utilization: number): number {
  const single = singleEngineDemand(pool, s, utilization);
  if (!pool.poolingGain || single <= 1) return single;
  // Smallest n with n × gain(n) ≥ single, interpolated between the neighbouring counts.
  let prev = 1;
  for (let n = 2; n <= 4096; n++) {
    const served = n * poolingGainAt(pool, n);
    if (served >= single) return n - 1 + (single - prev) / (served - prev);
    prev = served;
  }
  return single;
}

function singleEngineDemand(pool: PoolSpec, s: PoolSignals, utilization: number): number {
  const p = Math.max(1e-9, pool.capacity.prefillTokensPerS * utilization);
  const d = Math.max(1e-9, pool.capacity.decodeTokensPerS * utilization);
  const prefill = s.uncachedPrefillTokensPerS / p;
  const decode = s.decodeTokensPerS / d;
  const work = pool.role === "prefill" ? prefill : pool.role === "decode" ? decode : prefill + decode;
  const held = s.heldTokens / (pool.capacity.prefillTokensPerS * HELD_DRAIN_S);
  const total = work + held;
  return s.heldRequests > 0 ? Math.max(1, total) : total;
}

/** Mean of the samples taken within `windowMs` before `nowMs` (0 when none). */
export function windowMean(samples: readonly { atMs: number; need: number }[], nowMs: number, windowMs: number): number {
  let sum = 0;
  let n = 0;
  for (const x of samples) {
    if (x.atMs > nowMs - windowMs) {
      sum += x.need;
      n++;
    }
  }
  return n === 0 ? 0 : sum / n;
}

/** Largest sample within the window, and whether sampling (begun at `sinceMs`) covers all of it. */
export function windowMax(samples: readonly { atMs: number; need: number }[], nowMs: number, windowMs: number, sinceMs: number): { max: number; covered: boolean } {
  let max = 0;
  for (const x of samples) if (x.atMs > nowMs - windowMs) max = Math.max(max, x.need);
  return { max, covered: nowMs - sinceMs >= windowMs };
}

/** The pool's floor now: its min, a time-of-day floor, whichever is higher. */
export function floorAt(pool: PoolSpec, timeOfDayS: number): number {
  let f = pool.min;
  for (const x of pool.floors) {
    const inside = x.fromS <= x.toS ? timeOfDayS >= x.fromS && timeOfDayS < x.toS : timeOfDayS >= x.fromS || timeOfDayS < x.toS;
    if (inside) f = Math.max(f, x.min);
  }
  return Math.min(f, pool.max);
}
