// Hand-written SVG plots of a bench result: latency CDFs (TTFT, ITL, E2E; one line per load level) and,
// for a sweep, TTFT p95 and goodput versus offered load. Plain SVG 1.1 with inline attributes (no CSS,
// no scripts), so browsers and rsvg render it alike.

import { percentile } from "../workload/stats.ts";
import { loadLabel, type RunLoad } from "../workload/report.ts";

export interface PlotRun {
  load: RunLoad;
  ttft_s: number[];
  itl_s: number[];
  e2e_s: number[];
  ttft_p95_s: number | null;
  goodput_rps: number;
  throughput_rps: number;
}

const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];
const W = 380;
const H = 270;
const M = { l: 58, r: 14, t: 34, b: 46 };
const FONT = `font-family="Helvetica, Arial, sans-serif"`;

const esc = (s: string) => s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
const f = (v: number) => (Math.round(v * 10) / 10).toString();

/** About `count` round tick values covering [lo, hi]. */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!(hi > lo)) hi = lo + 1;
  const raw = (hi - lo) / count;
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) ?? 10 * mag;
  const out: number[] = [];
  for (let v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

/** The smallest round tick value ≥ hi (the top of an axis that starts at 0). */
export function niceMax(hi: number, count = 5): number {
  if (!(hi > 0)) return 1;
  const ticks = niceTicks(0, hi, count);
  const step = ticks.length > 1 ? ticks[1]! - ticks[0]! : hi;
  return Math.ceil(hi / step - 1e-9) * step;
}

const tickLabel = (v: number) => (Math.abs(v) >= 1000 ? `${v / 1000}k` : String(Number(v.toPrecision(6))));

interface Series {
  label: string;
  color: string;
  points: [number, number][];
  dashed?: boolean;
  markers?: boolean;
}

function panel(x0: number, y0: number, title: string, xLabel: string, yLabel: string, series: Series[], xr: [number, number], yr: [number, number], legend: "tl" | "none" = "tl"): string {
  const pw = W - M.l - M.r;
  const ph = H - M.t - M.b;
  const sx = (v: number) => x0 + M.l + ((Math.min(Math.max(v, xr[0]), xr[1]) - xr[0]) / (xr[1] - xr[0])) * pw;
  const sy = (v: number) => y0 + M.t + ph - ((Math.min(Math.max(v, yr[0]), yr[1]) - yr[0]) / (yr[1] - yr[0])) * ph;
  const parts: string[] = [];
  parts.push(`<rect x="${x0 + M.l}" y="${y0 + M.t}" width="${pw}" height="${ph}" fill="#ffffff" stroke="#888888" stroke-width="1"/>`);
  for (const t of niceTicks(xr[0], xr[1])) {
    if (t < xr[0] || t > xr[1]) continue;
    const x = f(sx(t));
    parts.push(`<line x1="${x}" y1="${y0 + M.t}" x2="${x}" y2="${y0 + M.t + ph}" stroke="#e4e4e4" stroke-width="1"/>`);
    parts.push(`<text x="${x}" y="${y0 + M.t + ph + 15}" font-size="10" text-anchor="middle" fill="#333333" ${FONT}>${tickLabel(t)}</text>`);
  }
  for (const t of niceTicks(yr[0], yr[1])) {
    if (t < yr[0] || t > yr[1]) continue;
    const y = f(sy(t));
    parts.push(`<line x1="${x0 + M.l}" y1="${y}" x2="${x0 + M.l + pw}" y2="${y}" stroke="#e4e4e4" stroke-width="1"/>`);
    parts.push(`<text x="${x0 + M.l - 5}" y="${y}" dy="3.5" font-size="10" text-anchor="end" fill="#333333" ${FONT}>${tickLabel(t)}</text>`);
  }
  parts.push(`<rect x="${x0 + M.l}" y="${y0 + M.t}" width="${pw}" height="${ph}" fill="none" stroke="#888888" stroke-width="1"/>`);
  for (const s of series) {
    if (s.points.length === 0) continue;
    const d = s.points.map(([x, y], i) => `${i === 0 ? "M" : "L"}${f(sx(x))},${f(sy(y))}`).join(" ");
    parts.push(`<path d="${d}" fill="none" stroke="${s.color}" stroke-width="1.8"${s.dashed ? ` stroke-dasharray="5,3"` : ""}/>`);
    if (s.markers) for (const [x, y] of s.points) parts.push(`<circle cx="${f(sx(x))}" cy="${f(sy(y))}" r="3" fill="${s.color}"/>`);
  }
  parts.push(`<text x="${x0 + W / 2}" y="${y0 + 18}" font-size="13" font-weight="bold" text-anchor="middle" fill="#111111" ${FONT}>${esc(title)}</text>`);
  parts.push(`<text x="${x0 + M.l + pw / 2}" y="${y0 + H - 10}" font-size="11" text-anchor="middle" fill="#111111" ${FONT}>${esc(xLabel)}</text>`);
  const yc = y0 + M.t + ph / 2;
  parts.push(`<text x="${x0 + 14}" y="${yc}" font-size="11" text-anchor="middle" fill="#111111" transform="rotate(-90 ${x0 + 14} ${yc})" ${FONT}>${esc(yLabel)}</text>`);
  // Legend on a white box at the top left (CDF panels share one legend in the figure header instead).
  const named = series.filter((s) => s.label !== "");
  if (legend === "tl" && (named.length > 1 || (named.length === 1 && series.length > 1))) {
    const boxW = 34 + Math.max(...named.map((s) => s.label.length)) * 5.6;
    const boxH = named.length * 14 + 6;
    const bx = x0 + M.l + 4;
    const by = y0 + M.t + 4;
    parts.push(`<rect x="${f(bx)}" y="${f(by)}" width="${f(boxW)}" height="${boxH}" fill="#ffffff" fill-opacity="0.9" stroke="#cccccc" stroke-width="1"/>`);
    named.forEach((s, i) => {
      const ly = by + 14 + i * 14;
      const lx = bx + 6;
      parts.push(`<line x1="${lx}" y1="${ly - 3}" x2="${lx + 16}" y2="${ly - 3}" stroke="${s.color}" stroke-width="2"${s.dashed ? ` stroke-dasharray="5,3"` : ""}/>`);
      parts.push(`<text x="${lx + 20}" y="${ly}" font-size="10" fill="#111111" ${FONT}>${esc(s.label)}</text>`);
    });
  }
  return parts.join("\n");
}

/** CDF points of `values` (at most `max` points, read at evenly spaced quantiles). */
function cdfPoints(values: readonly number[], max = 300): [number, number][] {
  if (values.length === 0) return [];
  const s = Float64Array.from(values).sort();
  const n = Math.min(max, s.length);
  const pts: [number, number][] = [[s[0]!, 0]];
  for (let i = 1; i <= n; i++) {
    const q = i / n;
    pts.push([s[Math.min(s.length - 1, Math.ceil(q * s.length) - 1)]!, q]);
  }
  return pts;
}

function cdfPanel(x0: number, y0: number, name: string, runs: readonly PlotRun[], get: (r: PlotRun) => number[]): string {
  // The x range ends at the largest p99.9 so one outlier does not squash the curves (the tail is clipped at the edge).
  let hi = 0;
  for (const r of runs) {
    const v = get(r);
    if (v.length) hi = Math.max(hi, percentile(Float64Array.from(v).sort(), 99.9));
  }
  const useMs = hi < 1;
  const k = useMs ? 1000 : 1;
  const series = runs.map((r, i) => ({ label: loadLabel(r.load), color: COLORS[i % COLORS.length]!, points: cdfPoints(get(r)).map(([x, y]) => [x * k, y] as [number, number]) }));
  return panel(x0, y0, `${name} CDF`, `${name} (${useMs ? "ms" : "s"})`, "fraction of requests", series, [0, niceMax(hi * k)], [0, 1], "none");
}

/** The SVG document for one bench result. */
export function renderSvg(runs: readonly PlotRun[], title: string): string {
  const sweep = runs.length > 1;
  const width = W * 3;
  const head = 44;
  const height = head + H * (sweep ? 2 : 1);
  const body: string[] = [];
  // One legend for the three CDF panels (same series in each), on the header's second line.
  let lx = 12;
  runs.forEach((r, i) => {
    const label = loadLabel(r.load);
    const color = COLORS[i % COLORS.length]!;
    body.push(`<line x1="${lx}" y1="34" x2="${lx + 18}" y2="34" stroke="${color}" stroke-width="2.5"/>`);
    body.push(`<text x="${lx + 23}" y="38" font-size="11" fill="#111111" ${FONT}>${esc(label)}</text>`);
    lx += 23 + label.length * 6.2 + 18;
  });
  body.push(cdfPanel(0, head, "TTFT", runs, (r) => r.ttft_s), cdfPanel(W, head, "ITL", runs, (r) => r.itl_s), cdfPanel(2 * W, head, "E2E", runs, (r) => r.e2e_s));
  if (sweep) {
    const closed = runs[0]!.load.concurrency !== null;
    const xs = runs.map((r) => (closed ? r.load.concurrency : r.load.rate) ?? 0);
    const xLabel = closed ? "concurrency (workers)" : "offered load (req/s)";
    const xr: [number, number] = [0, niceMax(Math.max(...xs))];
    const p95 = runs.map((r) => r.ttft_p95_s ?? 0);
    const useMs = Math.max(...p95) < 1;
    const k = useMs ? 1000 : 1;
    const ttft: Series = { label: "TTFT p95", color: COLORS[1]!, markers: true, points: runs.map((r, i) => [xs[i]!, (r.ttft_p95_s ?? NaN) * k] as [number, number]).filter(([, y]) => Number.isFinite(y)) };
    body.push(panel(0, head + H, "TTFT p95 vs load", xLabel, `TTFT p95 (${useMs ? "ms" : "s"})`, [ttft], xr, [0, niceMax(Math.max(...p95) * k)]));
    const good: Series = { label: "goodput", color: COLORS[2]!, markers: true, points: runs.map((r, i) => [xs[i]!, r.goodput_rps]) };
    const thr: Series = { label: "throughput", color: COLORS[0]!, dashed: true, points: runs.map((r, i) => [xs[i]!, r.throughput_rps]) };
    const yTop = niceMax(Math.max(...runs.map((r) => r.throughput_rps), closed ? 0 : Math.max(...xs)));
    const lines = [good, thr];
    if (!closed) lines.push({ label: "offered", color: "#999999", dashed: true, points: [[0, 0], [xr[1], xr[1]]] });
    body.push(panel(W, head + H, "Goodput vs load", xLabel, "requests/s", lines, xr, [0, yTop]));
  }
  return [
    `<?xml version="1.0" encoding="UTF-8"?>`,
    `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}" viewBox="0 0 ${width} ${height}">`,
    `<rect x="0" y="0" width="${width}" height="${height}" fill="#fafafa"/>`,
    `<text x="12" y="20" font-size="14" font-weight="bold" fill="#111111" ${FONT}>${esc(title)}</text>`,
    ...body,
    `</svg>`,
    "",
  ].join("\n");
}
