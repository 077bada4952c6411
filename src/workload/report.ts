// The bench result as JSON (the public contract: ttft/itl/e2e {p50,p90,p95,p99} in seconds,
// throughput {requests_per_s, tokens_per_s}, goodput, errors, cached_tokens_ratio, plus config and
// every run of a sweep), the stdout table, and `herd bench compare`.

import { type Percentiles, percentiles, type RequestRecord, type Summary } from "./stats.ts";

export interface RunLoad {
  /** Offered Poisson rate (req/s), or null. */
  rate: number | null;
  /** Closed-loop workers, or null. */
  concurrency: number | null;
  /** A trace's own timestamps. */
  recorded?: boolean;
}

/** Per-request figures kept in the JSON (enough for plots and for fitting a timing model). */
export interface RecordRow {
  at_s: number;
  start_s: number;
  session: string;
  ttft_s: number | null;
  e2e_s: number | null;
  itl_mean_s: number | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  cached_tokens: number | null;
  error: string | null;
}

export interface RunResult extends Summary {
  load: RunLoad;
  /** How late the generator handed requests off versus their offered time (seconds; open loop only). */
  send_lag: Percentiles | null;
  wall_s: number;
  records: RecordRow[];
}

export interface BenchResult extends Summary {
  herd_bench: 1;
  config: Record<string, unknown>;
  load: RunLoad;
  send_lag: Percentiles | null;
  /** One entry per load level (one for a single run); the top-level figures are runs[0]'s. */
  runs: RunResult[];
}

/** `dispatchLag_s[i]` is request i's hand-off lag (runner.ts); without it, start_s − at_s is used. */
export function toRunResult(summary: Summary, load: RunLoad, records: readonly RequestRecord[], wall_s: number, warmup_s = 0, dispatchLag_s?: readonly number[]): RunResult {
  const rows: RecordRow[] = records.map((r) => ({
    at_s: r.at_s, start_s: r.start_s, session: r.session, ttft_s: r.ttft_s, e2e_s: r.e2e_s,
    itl_mean_s: r.itl_s.length ? r.itl_s.reduce((a, b) => a + b, 0) / r.itl_s.length : null,
    prompt_tokens: r.prompt_tokens, completion_tokens: r.completion_tokens, cached_tokens: r.cached_tokens, error: r.error,
  }));
  const lagOf = (r: RequestRecord) => dispatchLag_s?.[r.index] ?? Math.max(0, r.start_s - r.at_s);
  const lag = load.concurrency === null ? percentiles(records.filter((r) => r.start_s >= warmup_s).map(lagOf)) : null;
  return { ...summary, load, send_lag: lag, wall_s, records: rows };
}

export function toBenchResult(config: Record<string, unknown>, runs: RunResult[]): BenchResult {
  const first = runs[0];
  if (first === undefined) throw new Error("no runs");
  const { records: _records, wall_s: _wall, ...top } = first;
  return { herd_bench: 1, config, ...top, runs };
}

export const loadLabel = (l: RunLoad): string =>
  l.concurrency !== null ? `conc ${l.concurrency}` : l.rate !== null ? `${fmtNum(l.rate)} req/s` : l.recorded ? "trace times" : "?";

export function fmtNum(v: number): string {
  if (!Number.isFinite(v) || Number.isInteger(v)) return String(v);
  const a = Math.abs(v);
  if (a >= 1000) return v.toFixed(0);
  if (a >= 100) return v.toFixed(1);
  if (a >= 10) return v.toFixed(2);
  return v.toPrecision(3).replace(/\.?0+$/, "") || "0";
}

const ms = (s: number | undefined | null) => (s === undefined || s === null ? "-" : fmtNum(s * 1000));
const sec = (s: number | undefined | null) => (s === undefined || s === null ? "-" : fmtNum(s));

/** Aligned text table: first column left, the rest right (also used by herd simulate). */
export function table(rows: string[][]): string {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  return rows.map((r) => r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join("  ").trimEnd()).join("\n");
}

/** The stdout table: one column per load level. */
export function renderTable(runs: readonly (Summary & { load: RunLoad; send_lag: Percentiles | null })[]): string {
  const col = (f: (r: (typeof runs)[number]) => string) => runs.map(f);
  const pct = (name: string, get: (r: Summary) => Percentiles | null, unit: "ms" | "s") =>
    (["p50", "p90", "p95", "p99"] as const).map((p) => [`${name} ${p} (${unit})`, ...col((r) => (unit === "ms" ? ms : sec)(get(r)?.[p]))]);
  const slo = runs[0]?.goodput.slo ?? {};
  const sloText = Object.entries(slo).map(([k, v]) => `${k.replace(/_s$/, "")}≤${fmtNum((v as number) * 1000)}ms`).join(",") || "none";
  const rows: string[][] = [
    ["load", ...col((r) => loadLabel(r.load))],
    ["requests ok / failed", ...col((r) => `${r.requests.completed} / ${r.requests.failed}`)],
    ["window (s)", ...col((r) => sec(r.duration_s))],
    ...pct("TTFT", (r) => r.ttft, "ms"),
    ...pct("ITL", (r) => r.itl, "ms"),
    ...pct("E2E", (r) => r.e2e, "s"),
    ["throughput (req/s)", ...col((r) => fmtNum(r.throughput.requests_per_s))],
    ["output tokens/s", ...col((r) => fmtNum(r.throughput.tokens_per_s))],
    ["input tokens/s", ...col((r) => fmtNum(r.throughput.input_tokens_per_s))],
    [`goodput share (${sloText})`, ...col((r) => `${(r.goodput.share * 100).toFixed(1)}%`)],
    ["goodput (req/s)", ...col((r) => fmtNum(r.goodput.requests_per_s))],
    ["cached tokens ratio", ...col((r) => (r.cached_tokens_ratio === null ? "n/a" : `${(r.cached_tokens_ratio * 100).toFixed(1)}%`))],
    ["errors", ...col((r) => (r.errors.total === 0 ? "0" : Object.entries(r.errors.by_kind).map(([k, n]) => `${k}:${n}`).join(" ")))],
    ["send lag p99 (ms)", ...col((r) => ms(r.send_lag?.p99))],
  ];
  return table(rows);
}

const COMPARED: readonly [string, (r: Summary) => number | null | undefined, "lower" | "higher"][] = [
  ...(["ttft", "itl", "e2e"] as const).flatMap((m) =>
    (["p50", "p90", "p95", "p99"] as const).map((p) => [`${m}.${p} (s)`, (r: Summary) => r[m]?.[p], "lower"] as [string, (r: Summary) => number | undefined, "lower"]),
  ),
  ["throughput.requests_per_s", (r) => r.throughput.requests_per_s, "higher"],
  ["throughput.tokens_per_s", (r) => r.throughput.tokens_per_s, "higher"],
  ["goodput.share", (r) => r.goodput.share, "higher"],
  ["goodput.requests_per_s", (r) => r.goodput.requests_per_s, "higher"],
  ["cached_tokens_ratio", (r) => r.cached_tokens_ratio, "higher"],
  ["errors.total", (r) => r.errors.total, "lower"],
];

/** `herd bench compare A B`: every figure of A and B and the ratio B/A, per matching run. */
export function renderCompare(a: BenchResult, b: BenchResult, names: [string, string] = ["A", "B"]): string {
  const out: string[] = [];
  const pairs = a.runs.length === b.runs.length && a.runs.length > 1 ? a.runs.map((r, i) => [r, b.runs[i]!] as const) : [[a, b] as const];
  for (const [ra, rb] of pairs) {
    const rows: string[][] = [["figure", names[0], names[1], "B/A"]];
    if (pairs.length > 1) out.push(`load ${loadLabel(ra.load)} vs ${loadLabel(rb.load)}`);
    for (const [name, get, better] of COMPARED) {
      const x = get(ra);
      const y = get(rb);
      const ratio = x === null || x === undefined || y === null || y === undefined ? "-" : x === 0 ? (y === 0 ? "1.00" : "inf") : (y / x).toFixed(2);
      const mark = ratio === "-" || ratio === "1.00" || ratio === "inf" ? "" : (better === "lower") === y! < x! ? " better" : " worse";
      rows.push([name, x === null || x === undefined ? "-" : fmtNum(x), y === null || y === undefined ? "-" : fmtNum(y), ratio + mark]);
    }
    out.push(table(rows), "");
  }
  return out.join("\n").trimEnd();
}

/** Parse a `--json` file written by herd bench (throws with a readable reason). */
export function parseBenchResult(text: string, source: string): BenchResult {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new Error(`${source}: not JSON (${(e as Error).message})`);
  }
  const o = v as Partial<BenchResult> | null;
  if (o === null || typeof o !== "object" || o.herd_bench !== 1 || !Array.isArray(o.runs) || o.throughput === undefined)
    throw new Error(`${source}: not a herd bench --json result`);
  return o as BenchResult;
}
