// Fit the sim engine's timing figures (cost.ts) to a `herd bench --json` run against a real engine,
// from its per-request records (ttft_s, itl_mean_s, e2e_s, start_s, prompt/completion/cached tokens).
//
// The model, per request (ms):
//   TTFT = (request + step) + token·n + pair·P          n = uncached prompt tokens, P = n·cached + n²/2
//   ITL  = (step + weights) + kv·C + token·U + pair·V    while the decode batch is below weights/token
// where, over the request's decode window (first token → end) as the other records overlap it:
//   C = mean context tokens decoded per step (its own prompt + half its output, plus each overlapping
//       request's, weighted by the overlap), U and V = prefill tokens and pairs of the requests whose
//       first token fell in the window, per decode step of this request (chunked prefill shares steps).
// TTFT rows use only prompts long enough that the token term is past the weight-read floor
// (n ≥ 2 × weights/token at the defaults); queueing is not modelled, so calibrate on a lightly loaded
// run (e.g. --concurrency 1 with a spread of prompt lengths). Rows are scaled by their observed value
// (relative error), and a tiny ridge pulls figures the data cannot separate toward the defaults.
// `step` is not separable from `request` and `weights` (only their sums appear), so it keeps the
// default and the two sums set the others.
import { type CostParams, DEFAULT_COST } from "../engine/sim/cost.ts";
import type { RecordRow } from "../workload/report.ts";

export interface CalibrationFit {
  cost: CostParams;
  /** sim-engine / simulate flags carrying the fit. */
  flags: string;
  rows: { ttft: number; itl: number; skipped: number; outliers: number };
  /** Coefficient of determination of each part of the fit (null without rows). */
  r2: { ttft: number | null; itl: number | null };
  /** Figures with data in their column (the rest stay at the defaults; collinear columns are not detected). */
  identified: string[];
}

interface Row {
  x: number[];
  y: number;
}

const NAMES = ["request+step", "step+weights", "token", "pair", "kv_token"] as const;

function solve(a: number[][], b: number[]): number[] {
  const n = b.length;
  const m = a.map((r, i) => [...r, b[i]!]);
  for (let c = 0; c < n; c++) {
    let p = c;
    for (let r = c + 1; r < n; r++) if (Math.abs(m[r]![c]!) > Math.abs(m[p]![c]!)) p = r;
    [m[c], m[p]] = [m[p]!, m[c]!];
    const d = m[c]![c]!;
    if (Math.abs(d) < 1e-300) continue;
    for (let r = 0; r < n; r++) {
      if (r === c) continue;
      const f = m[r]![c]! / d;
      for (let k = c; k <= n; k++) m[r]![k]! -= f * m[c]![k]!;
    }
  }
  return m.map((r, i) => (Math.abs(r[i]!) < 1e-300 ? 0 : r[n]! / r[i]!));
}

/**
 * Fit from bench records, one array per run (each run's times start at 0, so overlaps are only
 * looked for within a run: a sweep level or another file is another run).
 */
export function calibrate(runs: readonly (readonly RecordRow[])[], defaults: CostParams = DEFAULT_COST): CalibrationFit {
  const d = defaults;
  const prior = [d.requestMs + d.stepMs, d.stepMs + d.weightsMs, d.linearMsPerToken, d.pairMs, d.kvReadMsPerToken];
  const nMin = d.linearMsPerToken > 0 ? (2 * d.weightsMs) / d.linearMsPerToken : 0;
  const batchMax = d.linearMsPerToken > 0 ? d.weightsMs / d.linearMsPerToken : Infinity;
  const built = buildRows(runs, nMin, batchMax);
  const { th, kept, outliers } = fitWithoutOutliers(built.rows, prior);
  const identified: string[] = NAMES.filter((_, i) => kept.some((r) => r.x[i] !== 0));
  const cost = costFromFit(th, d);
  return {
    cost,
    flags: costFlags(cost),
    rows: { ttft: built.ttft, itl: built.itl, skipped: built.skipped, outliers },
    r2: { ttft: r2(kept, th, 0), itl: r2(kept, th, 1) },
    identified,
  };
}

/** One successful request's figures over its decode window (first token → end). */
interface Window {
  r: RecordRow;
  /** Uncached prompt tokens. */
  n: number;
  c: number;
  from: number;
  to: number;
  first: number;
  ctx: number;
}

function windows(records: readonly RecordRow[]): Window[] {
  return records
    .filter((r) => r.error === null && r.ttft_s !== null && r.e2e_s !== null && r.prompt_tokens !== null)
    .map((r) => {
      const n = r.prompt_tokens! - (r.cached_tokens ?? 0);
      return { r, n, c: r.cached_tokens ?? 0, from: r.start_s + r.ttft_s!, to: r.start_s + r.e2e_s!, first: r.start_s + r.ttft_s!, ctx: r.prompt_tokens! + (r.completion_tokens ?? 0) / 2 };
    });
}

/** The TTFT and ITL rows of every request, in record order, with the counts the fit reports. */
function buildRows(runs: readonly (readonly RecordRow[])[], nMin: number, batchMax: number): { rows: Row[]; ttft: number; itl: number; skipped: number } {
  const out = { rows: [] as Row[], ttft: 0, itl: 0, skipped: 0 };
  for (const win of runs.map(windows)) for (const w of win) {
    if (w.n >= nMin && w.n > 0) {
      out.rows.push({ x: [1, 0, w.n, w.n * w.c + (w.n * w.n) / 2, 0], y: w.r.ttft_s! * 1000 });
      out.ttft++;
    } else out.skipped++;
    const itl = itlRow(w, win, batchMax);
    if (itl === "skip") out.skipped++;
    else if (itl !== null) {
      out.rows.push(itl);
      out.itl++;
    }
  }
  return out;
}

/** `w`'s ITL row from the requests of its run overlapping its decode window; "skip" past batchMax. */
function itlRow(w: Window, win: readonly Window[], batchMax: number): Row | "skip" | null {
  const steps = (w.r.completion_tokens ?? 0) - 1;
  if (w.r.itl_mean_s === null || steps < 1 || w.to <= w.from) return null;
  const len = w.to - w.from;
  let batch = 1;
  let ctx = w.ctx;
  let u = 0;
  let v = 0;
  for (const o of win) {
    if (o === w) continue;
    const ov = Math.min(w.to, o.to) - Math.max(w.from, o.from);
    if (ov > 0) {
      batch += ov / len;
      ctx += (ov / len) * o.ctx;
    }
    if (o.first > w.from && o.first <= w.to) {
      u += o.n / steps;
      v += (o.n * o.c + (o.n * o.n) / 2) / steps;
    }
  }
  if (batch >= batchMax) return "skip";
  return { x: [0, 1, u, v, ctx], y: w.r.itl_mean_s * 1000 };
}

// Least squares on relative errors, a tiny ridge per figure toward its default, figures that come
// out negative pinned at 0 (active set), then one refit without outliers (relative residual above
// 4× the median: a stalled step, a cold first request) so a noisy machine does not drag the fit.
function fitWithoutOutliers(rows: readonly Row[], prior: readonly number[]): { th: number[]; kept: Row[]; outliers: number } {
  let th = fit(rows, prior);
  const relErr = rows.map((r) => Math.abs(predict(r, th) - r.y) / (r.y || 1));
  // Medians per kind: TTFT rows are noisier than ITL rows (one measurement vs a mean of many gaps).
  const medianOf = (kind: 0 | 1) => {
    const xs = relErr.filter((_, i) => rows[i]!.x[kind] === 1).sort((p, q) => p - q);
    return xs[Math.floor(xs.length / 2)] ?? 0;
  };
  const med = [medianOf(0), medianOf(1)];
  const kept = rows.filter((r, i) => relErr[i]! <= Math.max(4 * med[r.x[0] === 1 ? 0 : 1]!, 0.01));
  const outliers = rows.length - kept.length;
  if (outliers > 0) th = fit(kept, prior);
  return { th, kept, outliers };
}

function fit(use: readonly Row[], prior: readonly number[]): number[] {
  const k = NAMES.length;
  const fixed = new Set<number>();
  let th: number[] = prior.slice();
  for (let round = 0; round < k; round++) {
    const ata = Array.from({ length: k }, () => new Array<number>(k).fill(0));
    const atb = new Array<number>(k).fill(0);
    for (const row of use) {
      const s = row.y > 0 ? 1 / row.y : 0;
      for (let i = 0; i < k; i++) {
        if (fixed.has(i)) continue;
        atb[i]! += row.x[i]! * s;
        for (let j = 0; j < k; j++) if (!fixed.has(j)) ata[i]![j]! += row.x[i]! * s * row.x[j]! * s;
      }
    }
    const eps = 1e-9 * Math.max(1, use.length);
    for (let i = 0; i < k; i++) {
      const scale = prior[i]! > 0 ? 1 / prior[i]! : 1;
      if (fixed.has(i)) {
        ata[i]![i] = 1;
        atb[i] = 0;
        continue;
      }
      ata[i]![i]! += eps * scale * scale;
      atb[i]! += eps * scale * scale * prior[i]!;
    }
    th = solve(ata, atb);
    const neg = th.findIndex((x, i) => x < 0 && !fixed.has(i));
    if (neg < 0) break;
    fixed.add(neg);
  }
  return th.map((x) => Math.max(0, x));
}

const predict = (r: Row, th: readonly number[]) => r.x.reduce((s, x, i) => s + x * th[i]!, 0);

function costFromFit(th: readonly number[], d: CostParams): CostParams {
  const [a, cn, token, pair, kv] = th as [number, number, number, number, number];
  const step = Math.min(d.stepMs, a, cn);
  return { stepMs: step, weightsMs: cn - step, linearMsPerToken: token, pairMs: pair, kvReadMsPerToken: kv, requestMs: a - step };
}

/** Coefficient of determination over the kept rows of one kind (0 TTFT, 1 ITL). */
function r2(kept: readonly Row[], th: readonly number[], which: 0 | 1): number | null {
  const sel = kept.filter((r) => r.x[which] === 1);
  if (sel.length === 0) return null;
  const mean = sel.reduce((s, r) => s + r.y, 0) / sel.length;
  let ssr = 0;
  let sst = 0;
  for (const r of sel) {
    const p = predict(r, th);
    ssr += (r.y - p) ** 2;
    sst += (r.y - mean) ** 2;
  }
  return sst === 0 ? null : 1 - ssr / sst;
}

const sig = (x: number) => Number(x.toPrecision(4)).toString();

export function costFlags(c: CostParams): string {
  return `--step-ms ${sig(c.stepMs)} --weights-ms ${sig(c.weightsMs)} --token-ms ${sig(c.linearMsPerToken)} --pair-ms ${sig(c.pairMs)} --kv-token-ms ${sig(c.kvReadMsPerToken)} --request-ms ${sig(c.requestMs)}`;
}
