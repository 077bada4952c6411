// Figures from per-request records: percentiles, throughput, goodput under SLOs, errors, cached-token
// ratio. Pure: records in, a Summary out (the runner measures, this file only counts).

import { BenchInputError } from "./plan.ts";

/** What one request did, as seen by the client. Times in seconds; null when the request never got there. */
export interface RequestRecord {
  index: number;
  session: string;
  /** Offered arrival time (from the plan). */
  at_s: number;
  /** When it was actually sent, from the start of the run. */
  start_s: number;
  /** Time to the first chunk with generated text. */
  ttft_s: number | null;
  /** Every gap between consecutive chunks with generated text. */
  itl_s: number[];
  e2e_s: number | null;
  prompt_tokens: number | null;
  completion_tokens: number | null;
  /** usage.prompt_tokens_details.cached_tokens (null when the server does not report it). */
  cached_tokens: number | null;
  /** Error kind (e.g. "http_503", "connect", "stream_error", "timeout"), null on success. */
  error: string | null;
}

export interface Percentiles {
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  mean: number;
  max: number;
  count: number;
}

/** SLO bounds in seconds. itl bounds a request's mean inter-token gap (TPOT); a request meets the SLO when every given bound holds. */
export interface Slo {
  ttft_s?: number;
  itl_s?: number;
  e2e_s?: number;
}

export interface Summary {
  requests: { sent: number; measured: number; completed: number; failed: number; warmup_excluded: number };
  /** Measurement window: from the first measured send to the last measured finish. */
  duration_s: number;
  ttft: Percentiles | null;
  itl: Percentiles | null;
  e2e: Percentiles | null;
  throughput: { requests_per_s: number; tokens_per_s: number; input_tokens_per_s: number };
  goodput: { slo: Slo; requests: number; share: number; requests_per_s: number };
  errors: { total: number; by_kind: Record<string, number> };
  tokens: { input: number; output: number; cached: number };
  /** cached_tokens / prompt_tokens over completed requests that report it; null when none does. */
  cached_tokens_ratio: number | null;
}

/** Percentile `p` (0–100) of ascending `sorted`, linear interpolation between ranks (numpy's default). */
export function percentile(sorted: ArrayLike<number>, p: number): number {
  const n = sorted.length;
  if (n === 0) return NaN;
  const rank = (Math.min(100, Math.max(0, p)) / 100) * (n - 1);
  const lo = Math.floor(rank);
  const hi = Math.min(n - 1, lo + 1);
  return sorted[lo]! + (sorted[hi]! - sorted[lo]!) * (rank - lo);
}

export function percentiles(values: ArrayLike<number>): Percentiles | null {
  if (values.length === 0) return null;
  const s = Float64Array.from(values as ArrayLike<number>).sort();
  let sum = 0;
  for (const v of s) sum += v;
  return { p50: percentile(s, 50), p90: percentile(s, 90), p95: percentile(s, 95), p99: percentile(s, 99), mean: sum / s.length, max: s[s.length - 1]!, count: s.length };
}

/** "2s", "50ms", "1.5" (seconds), "250us" → seconds. */
export function parseDuration(text: string): number {
  const m = /^\s*([0-9]*\.?[0-9]+(?:e[+-]?\d+)?)\s*(s|ms|us|µs|m)?\s*$/i.exec(text);
  if (!m) throw new BenchInputError(`not a duration: ${JSON.stringify(text)} (e.g. 2s, 50ms)`);
  const v = Number(m[1]);
  const unit = (m[2] ?? "s").toLowerCase();
  return unit === "ms" ? v / 1000 : unit === "us" || unit === "µs" ? v / 1e6 : unit === "m" ? v * 60 : v;
}

/** `ttft=2s,itl=50ms,e2e=30s` (tpot is accepted for itl). */
export function parseSlo(text: string): Slo {
  const slo: Slo = {};
  for (const part of text.split(",")) {
    if (part.trim() === "") continue;
    const [k, v] = part.split("=", 2) as [string, string | undefined];
    if (v === undefined) throw new BenchInputError(`--slo: expected key=duration, got ${JSON.stringify(part)}`);
    const key = k.trim().toLowerCase();
    const s = parseDuration(v);
    if (key === "ttft") slo.ttft_s = s;
    else if (key === "itl" || key === "tpot") slo.itl_s = s;
    else if (key === "e2e" || key === "e2el") slo.e2e_s = s;
    else throw new BenchInputError(`--slo: unknown key ${JSON.stringify(k)} (ttft, itl, e2e)`);
  }
  return slo;
}

const mean = (xs: readonly number[]) => (xs.length === 0 ? 0 : xs.reduce((a, b) => a + b, 0) / xs.length);

/** Whether a finished request meets every bound of `slo` (failed requests never do). */
export function meetsSlo(r: RequestRecord, slo: Slo): boolean {
  if (r.error !== null || r.ttft_s === null || r.e2e_s === null) return false;
  if (slo.ttft_s !== undefined && r.ttft_s > slo.ttft_s) return false;
  if (slo.itl_s !== undefined && mean(r.itl_s) > slo.itl_s) return false;
  if (slo.e2e_s !== undefined && r.e2e_s > slo.e2e_s) return false;
  return true;
}

/** Summarize records; requests sent before `warmup_s` are left out of every figure. */
export function summarize(records: readonly RequestRecord[], opts: { warmup_s: number; slo: Slo }): Summary {
  const measured = records.filter((r) => r.start_s >= opts.warmup_s);
  const ok = measured.filter((r) => r.error === null);
  const byKind: Record<string, number> = {};
  for (const r of measured) if (r.error !== null) byKind[r.error] = (byKind[r.error] ?? 0) + 1;
  const itls: number[] = [];
  for (const r of ok) for (const g of r.itl_s) itls.push(g);
  let start = Infinity;
  let end = -Infinity;
  for (const r of measured) {
    start = Math.min(start, r.start_s);
    end = Math.max(end, r.start_s + (r.e2e_s ?? 0));
  }
  const duration_s = measured.length === 0 ? 0 : Math.max(0, end - start);
  const rate = (n: number) => (duration_s > 0 ? n / duration_s : 0);
  let input = 0;
  let output = 0;
  let cached = 0;
  let cachedOf = 0;
  let reported = false;
  for (const r of ok) {
    input += r.prompt_tokens ?? 0;
    output += r.completion_tokens ?? 0;
    if (r.cached_tokens !== null) {
      reported = true;
      cached += r.cached_tokens;
      cachedOf += r.prompt_tokens ?? 0;
    }
  }
  const good = ok.filter((r) => meetsSlo(r, opts.slo)).length;
  return {
    requests: { sent: records.length, measured: measured.length, completed: ok.length, failed: measured.length - ok.length, warmup_excluded: records.length - measured.length },
    duration_s,
    ttft: percentiles(ok.map((r) => r.ttft_s!)),
    itl: percentiles(itls),
    e2e: percentiles(ok.map((r) => r.e2e_s!)),
    throughput: { requests_per_s: rate(ok.length), tokens_per_s: rate(output), input_tokens_per_s: rate(input) },
    goodput: { slo: opts.slo, requests: good, share: measured.length === 0 ? 0 : good / measured.length, requests_per_s: rate(good) },
    errors: { total: measured.length - ok.length, by_kind: byKind },
    tokens: { input, output, cached },
    cached_tokens_ratio: reported && cachedOf > 0 ? cached / cachedOf : null,
  };
}
