// Offered load that changes over time, for the planner's simulations: `diurnal` (a day's sinusoid
// between a trough and a peak, lowest at night), `step`, `ramp`, `sine`, `burst`, each
// `NAME[:key=value,…]`. Arrivals are a non-homogeneous Poisson process drawn by thinning
// (Lewis & Shedler 1979): candidates at the peak rate, each kept with probability rate(t)/peak —
// pure and seeded, so one seed gives one trace.
import { exponential, type Rng } from "../core/rng.ts";
import { BenchInputError } from "./plan.ts";

export interface RateShape {
  name: string;
  /** Offered requests per second at time t (seconds from the start). */
  rateAt(tS: number): number;
  /** An upper bound of rateAt over the run. */
  peak: number;
  /** Default run length, seconds. */
  durationS: number;
  /** Mean prompt and output tokens of a request. */
  isl: number;
  osl: number;
}

type Params = Record<string, number>;

const SHAPES: Record<string, { defaults: Params; make(p: Params): (t: number) => number; duration(p: Params): number }> = {
  // Lowest at 04:00, highest at 16:00 of a `period`-second day; zero below `idle` (a quiet night).
  diurnal: {
    defaults: { peak: 16, trough: 0.5, period: 86_400, idle: 0, isl: 2048, osl: 256 },
    make: (p) => (t) => {
      const phase = ((t % p.period!) / p.period!) * 2 * Math.PI;
      const r = p.trough! + ((p.peak! - p.trough!) * (1 - Math.cos(phase - (4 / 24) * 2 * Math.PI))) / 2;
      return r < p.idle! ? 0 : r;
    },
    duration: (p) => p.period!,
  },
  step: { defaults: { from: 1, to: 8, at: 600, duration: 1800, isl: 8000, osl: 256 }, make: (p) => (t) => (t < p.at! ? p.from! : p.to!), duration: (p) => p.duration! },
  ramp: { defaults: { from: 0.5, to: 12, duration: 3600, isl: 2048, osl: 256 }, make: (p) => (t) => p.from! + ((p.to! - p.from!) * Math.min(1, t / p.duration!)), duration: (p) => p.duration! },
  sine: { defaults: { mean: 6, amplitude: 5, period: 1800, duration: 7200, isl: 2048, osl: 256 }, make: (p) => (t) => Math.max(0, p.mean! + p.amplitude! * Math.sin((2 * Math.PI * t) / p.period!)), duration: (p) => p.duration! },
  burst: {
    defaults: { base: 1, peak: 12, every: 900, length: 60, duration: 3600, isl: 2048, osl: 256 },
    make: (p) => (t) => (t % p.every! < p.length! ? p.peak! : p.base!),
    duration: (p) => p.duration!,
  },
};

export const RATE_SHAPES = Object.keys(SHAPES);

/** Parse `diurnal:peak=20,trough=1`. */
export function parseRateShape(text: string): RateShape {
  const [name, rest] = text.includes(":") ? [text.slice(0, text.indexOf(":")), text.slice(text.indexOf(":") + 1)] : [text, ""];
  const s = SHAPES[name];
  if (!s) throw new BenchInputError(`unknown load shape ${JSON.stringify(name)} (one of ${RATE_SHAPES.join(", ")})`);
  const p: Params = { ...s.defaults };
  for (const part of rest.split(",").filter(Boolean)) {
    const [k, v] = part.split("=");
    if (!k || !(k in s.defaults)) throw new BenchInputError(`${name}: unknown option ${JSON.stringify(k)} (options: ${Object.keys(s.defaults).join(", ")})`);
    const n = Number(v);
    if (v === undefined || v === "" || !Number.isFinite(n) || n < 0) throw new BenchInputError(`${name}: ${k} must be a non-negative number, got ${JSON.stringify(v)}`);
    p[k] = n;
  }
  if ((p.period ?? 1) <= 0 || (p.duration ?? 1) <= 0) throw new BenchInputError(`${name}: period and duration must be positive`);
  const rateAt = s.make(p);
  const durationS = s.duration(p);
  let peak = 0;
  for (let t = 0; t <= durationS; t += Math.max(1, durationS / 10_000)) peak = Math.max(peak, rateAt(t));
  // Sampled finely enough for these shapes; 1% above it keeps thinning's bound safe.
  return { name, rateAt, peak: peak * 1.01, durationS, isl: p.isl!, osl: p.osl! };
}

/** Arrival times (seconds) over [0, durationS) by thinning; each with prompt and output lengths. */
export function* shapedArrivals(shape: RateShape, durationS: number, rng: Rng): Generator<{ atS: number; isl: number; osl: number }> {
  if (shape.peak <= 0) return;
  const meanGapS = 1 / shape.peak;
  for (let t = exponential(rng, meanGapS); t < durationS; t += exponential(rng, meanGapS)) {
    if (rng.float() * shape.peak >= shape.rateAt(t)) continue;
    // Lengths: lognormal around the means (σ = 0.5), at least one token.
    yield { atS: t, isl: Math.max(1, Math.round(shape.isl * lognormal(rng, 0.5))), osl: Math.max(1, Math.round(shape.osl * lognormal(rng, 0.5))) };
  }
}

/** A lognormal multiplier with median 1 and mean 1 (μ = −σ²/2). */
export function lognormal(rng: Rng, sigma: number): number {
  const u1 = Math.max(rng.float(), 1e-12);
  const u2 = rng.float();
  const z = Math.sqrt(-2 * Math.log(u1)) * Math.cos(2 * Math.PI * u2);
  return Math.exp(sigma * z - (sigma * sigma) / 2);
}
