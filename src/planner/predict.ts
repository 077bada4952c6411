// SLA mode's load predictor (pure): Holt's linear exponential smoothing (level + trend) over the
// planner's per-tick demand windows, on irregular ticks (a poke runs one early), forecast a horizon
// ahead — the time a new engine needs to serve (a cold start and a tick), since an engine asked for
// now serves the load of then. Dynamo's SLA planner forecasts the next adjustment interval's
// request count, ISL and OSL the same way (constant, ARIMA, Kalman local linear trend, Prophet;
// ai-dynamo/dynamo docs/pages/design-docs/planner-design.md "Load Prediction"); Holt's is the
// Kalman local-linear-trend's steady state, with no fitting and O(1) memory.
// The trend's share of a forecast is bounded (±TREND_SHARE_MAX of the level): Poisson noise in one
// tick's window must not turn into a runaway trend over a minute's horizon.

export interface Holt {
  level: number;
  /** Change of the level per ms. */
  trend: number;
  atMs: number;
  samples: number;
}

/** Weight of a new window in the level, and of a new level change in the trend. */
export const HOLT_ALPHA = 0.5;
export const HOLT_BETA = 0.2;
export const TREND_SHARE_MAX = 0.5;

/** The smoothing after one more window `x` observed at `atMs` (x non-finite or negative: unchanged). */
export function holtUpdate(h: Holt | null, x: number, atMs: number, alpha = HOLT_ALPHA, beta = HOLT_BETA): Holt | null {
  if (!Number.isFinite(x) || x < 0) return h;
  if (h === null) return { level: x, trend: 0, atMs, samples: 1 };
  const dt = Math.max(1, atMs - h.atMs);
  const predicted = h.level + h.trend * dt;
  const level = alpha * x + (1 - alpha) * predicted;
  const trend = beta * ((level - h.level) / dt) + (1 - beta) * h.trend;
  return { level: Math.max(0, level), trend, atMs, samples: h.samples + 1 };
}

/** The forecast `horizonMs` after the last window (never negative; the trend's share bounded). */
export function holtForecast(h: Holt | null, horizonMs: number): number {
  if (h === null) return NaN;
  // Until two windows are in there is no trend to read.
  if (h.samples < 2) return h.level;
  const bound = TREND_SHARE_MAX * h.level;
  const rise = Math.max(-bound, Math.min(bound, h.trend * Math.max(0, horizonMs)));
  return Math.max(0, h.level + rise);
}
