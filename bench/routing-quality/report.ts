// The routing quality benchmark's tables and its check of issue 4's targets.
import { table } from "../../src/workload/report.ts";
import type { Row, Scenario } from "./lib.ts";

export const HERD = "kv (herd)";

const ms = (s: number | undefined) => (s === undefined ? "-" : (s * 1000).toFixed(s < 0.1 ? 1 : 0));
const pct = (x: number | null) => (x === null ? "n/a" : `${(x * 100).toFixed(1)}%`);

/** One workload × seed: a row per variant; "vs RR" = TTFT p95 / round-robin's (below 1 is better). */
export function renderTable(rows: readonly Row[]): string {
  const rr = rows.find((r) => r.variant === "round-robin");
  const rrP95 = rr?.summary.ttft?.p95;
  const out: string[][] = [["policy", "TTFT p50 (ms)", "TTFT p95", "ITL p95", "req/s", "out tok/s", "prefix hit", "TTFT p95 vs RR", "preempt"]];
  for (const r of rows) {
    const s = r.summary;
    const p95 = s.ttft?.p95;
    out.push([
      r.variant, ms(s.ttft?.p50), ms(p95), ms(s.itl?.p95), s.throughput.requests_per_s.toFixed(2), s.throughput.tokens_per_s.toFixed(0),
      pct(r.prefix_hit), p95 !== undefined && rrP95 ? `${(p95 / rrP95).toFixed(2)}×` : "-", String(r.preemptions),
    ]);
  }
  return table(out);
}

export interface Check {
  scenario: string;
  seed: number;
  ok: boolean;
  /** The best other variant has exactly the same TTFT p95 (not a win, not a loss). */
  tie?: boolean;
  text: string;
}

/** Issue 4's targets, per workload and seed, from the rows of that workload and seed. */
export function checkTargets(rows: readonly Row[], scenarios: readonly Scenario[]): Check[] {
  const out: Check[] = [];
  for (const s of scenarios) {
    const seeds = [...new Set(rows.filter((r) => r.scenario === s.name).map((r) => r.seed))];
    for (const seed of seeds) {
      const part = rows.filter((r) => r.scenario === s.name && r.seed === seed);
      const herd = part.find((r) => r.variant === HERD)?.summary.ttft?.p95;
      const others = part.filter((r) => r.variant !== HERD && r.summary.ttft);
      if (herd === undefined || others.length === 0) continue;
      const best = others.reduce((a, b) => (b.summary.ttft!.p95 < a.summary.ttft!.p95 ? b : a));
      const bestP95 = best.summary.ttft!.p95;
      const rr = part.find((r) => r.variant === "round-robin")?.summary.ttft?.p95;
      const ratio = herd / bestP95;
      const vs = `kv (herd) TTFT p95 ${ms(herd)} ms vs best other ${best.variant} ${ms(bestP95)} ms (${ratio.toFixed(3)}×)`;
      if (s.key.startsWith("c")) out.push({ scenario: s.name, seed, ok: ratio <= 1.05, text: `(${s.key}) ${s.name} seed ${seed}: ${vs}, target ≤ 1.05×` });
      else out.push({ scenario: s.name, seed, ok: ratio < 1, tie: ratio === 1, text: `(${s.key}) ${s.name} seed ${seed}: ${vs}, target < 1×` });
      if (s.key === "a" && rr !== undefined) {
        const gain = rr / herd;
        out.push({ scenario: s.name, seed, ok: gain >= 3, text: `(a) ${s.name} seed ${seed}: round-robin TTFT p95 / kv (herd) = ${gain.toFixed(1)}×, target ≥ 3×` });
      }
    }
  }
  return out;
}
