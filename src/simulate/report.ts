// herd simulate's output: one entry per (load, policy, replica count) with bench's Summary (same
// percentiles, goodput and cached-token ratio code as `herd bench`), the per-replica spread and the
// workload answers; the comparison table; and the operator's questions answered in plain lines.
import { fmtNum, loadLabel, type RunLoad, table } from "../workload/report.ts";
import type { Slo, Summary } from "../workload/stats.ts";
import { CPU_TIERS, DISTANCE_EDGES, type ReuseStats } from "./reuse.ts";
import type { ReplicaResult, SimRunResult } from "./run.ts";

export interface SimEntry {
  load: RunLoad;
  policy: string;
  replicas: number;
  summary: Summary;
  /** Whether goodput share ≥ the target (all requests count as good without --slo). */
  meets_slo: boolean;
  spread: { requests_max_over_mean: number; prefill_max_over_mean: number; queue_max_over_mean: number };
  replica_detail: ReplicaResult[];
  reuse: ReturnType<ReuseStats["toJSON"]>;
  sharing: { prompt_blocks: number; seen_before_share: number; lower_bound: boolean };
  virtual_s: number;
  wall_s: number;
}

const maxOverMean = (xs: readonly number[]): number => {
  const mean = xs.reduce((a, b) => a + b, 0) / (xs.length || 1);
  return mean === 0 ? 1 : Math.max(...xs) / mean;
};

export function toEntry(load: RunLoad, policy: string, replicas: number, summary: Summary, run: SimRunResult, targetShare: number): SimEntry {
  const d = run.replicas;
  return {
    load, policy, replicas, summary,
    meets_slo: summary.requests.measured > 0 && summary.goodput.share >= targetShare,
    spread: {
      requests_max_over_mean: maxOverMean(d.map((r) => r.requests)),
      prefill_max_over_mean: maxOverMean(d.map((r) => r.prompt_tokens - r.cached_tokens)),
      queue_max_over_mean: maxOverMean(d.map((r) => r.mean_queue)),
    },
    replica_detail: d,
    reuse: run.reuse.toJSON(),
    sharing: { prompt_blocks: run.sharing.blocks, seen_before_share: run.sharing.share, lower_bound: run.sharing.saturated },
    virtual_s: run.virtual_s,
    wall_s: run.wall_s,
  };
}

const ms = (s: number | undefined | null) => (s === undefined || s === null ? "-" : fmtNum(s * 1000));
const pct = (x: number | null | undefined) =>
  x === null || x === undefined ? "n/a" : `${(x * 100).toFixed(x !== 0 && Math.abs(x) < 0.01 ? 2 : 1)}%`;

export function sloText(slo: Slo): string {
  return Object.entries(slo).map(([k, v]) => `${k.replace(/_s$/, "")}≤${fmtNum((v as number) * 1000)}ms`).join(",") || "none";
}

/** The comparison table: one row per run. */
export function renderSimTable(entries: readonly SimEntry[]): string {
  const rows: string[][] = [[
    "load", "policy", "replicas", "ok/failed", "TTFT p50", "p95", "p99 (ms)", "ITL p50", "p95 (ms)", "E2E p95 (s)",
    "goodput", "good req/s", "prefix hit", "req spread", "prefill spread", "SLO",
  ]];
  for (const e of entries) {
    const s = e.summary;
    rows.push([
      loadLabel(e.load), e.policy, String(e.replicas), `${s.requests.completed}/${s.requests.failed}`,
      ms(s.ttft?.p50), ms(s.ttft?.p95), ms(s.ttft?.p99), ms(s.itl?.p50), ms(s.itl?.p95), s.e2e ? fmtNum(s.e2e.p95) : "-",
      pct(s.goodput.share), fmtNum(s.goodput.requests_per_s), pct(s.cached_tokens_ratio),
      fmtNum(e.spread.requests_max_over_mean), fmtNum(e.spread.prefill_max_over_mean), e.meets_slo ? "yes" : "no",
    ]);
  }
  return table(rows);
}

export interface AnswerOptions {
  slo: Slo;
  targetShare: number;
}

/** The operator's questions, answered from the runs (JSON form; renderAnswers prints it). */
export function answers(entries: readonly SimEntry[], o: AnswerOptions): Record<string, unknown> {
  const first = entries[0];
  const out: Record<string, unknown> = {};
  if (!first) return out;
  out.prefix_sharing = { seen_before_share: first.sharing.seen_before_share, lower_bound: first.sharing.lower_bound };
  const gains: Record<string, unknown>[] = [];
  const byKey = new Map<string, Map<string, SimEntry>>();
  for (const e of entries) {
    const k = `${loadLabel(e.load)}|${e.replicas}`;
    if (!byKey.has(k)) byKey.set(k, new Map());
    byKey.get(k)!.set(e.policy, e);
  }
  for (const [k, m] of byKey) {
    const kv = m.get("kv");
    if (!kv) continue;
    for (const base of ["session", "round-robin"]) {
      const b = m.get(base);
      if (!b) continue;
      const [load, replicas] = k.split("|");
      gains.push({
        load, replicas: Number(replicas), versus: base,
        prefix_hit: { kv: kv.summary.cached_tokens_ratio, [base]: b.summary.cached_tokens_ratio },
        ttft_p95_s: { kv: kv.summary.ttft?.p95 ?? null, [base]: b.summary.ttft?.p95 ?? null },
        goodput_share: { kv: kv.summary.goodput.share, [base]: b.summary.goodput.share },
      });
    }
  }
  out.kv_routing_gain = gains;
  // The CPU-tier question for the deployment one would run: a kv run when there is one (the cache the
  // router would exploit), the smallest replica count meeting the SLO, else the largest tried.
  const pool = entries.some((e) => e.policy === "kv") ? entries.filter((e) => e.policy === "kv") : entries;
  const passing = pool.filter((e) => e.meets_slo).sort((a, b) => a.replicas - b.replicas);
  const tierRun = passing[0] ?? [...pool].sort((a, b) => b.replicas - a.replicas)[0]!;
  out.cpu_tier = { policy: tierRun.policy, replicas: tierRun.replicas, load: loadLabel(tierRun.load), ...tierRun.reuse };
  const need: Record<string, unknown>[] = [];
  const groups = new Map<string, SimEntry[]>();
  for (const e of entries) {
    const k = `${loadLabel(e.load)}|${e.policy}`;
    groups.set(k, [...(groups.get(k) ?? []), e]);
  }
  for (const [k, es] of groups) {
    const [load, policy] = k.split("|");
    const ok = es.filter((e) => e.meets_slo).map((e) => e.replicas).sort((a, b) => a - b);
    const tried = es.map((e) => e.replicas).sort((a, b) => a - b);
    need.push({ load, policy, smallest_replicas_meeting_slo: ok[0] ?? null, tried });
  }
  out.replicas_needed = { slo: o.slo, target_goodput_share: o.targetShare, by_policy: need };
  return out;
}

export function renderAnswers(a: Record<string, unknown>, o: AnswerOptions): string {
  const lines: string[] = [];
  const sharing = a.prefix_sharing as { seen_before_share: number; lower_bound: boolean } | undefined;
  if (!sharing) return "";
  lines.push(`How much prefix do requests share?  ${pct(sharing.seen_before_share)} of prompt blocks were already in an earlier request's prompt${sharing.lower_bound ? " (lower bound: too many distinct blocks to track all)" : ""} — the hit rate of one infinitely large prefix cache.`);
  const gains = a.kv_routing_gain as { load: string; replicas: number; versus: string; prefix_hit: Record<string, number | null>; ttft_p95_s: Record<string, number | null>; goodput_share: Record<string, number> }[];
  if (gains.length === 0) lines.push("What does KV-aware routing gain?  Run with --policy kv,session,round-robin to compare.");
  else {
    lines.push("What does KV-aware routing gain over session affinity and round-robin?");
    for (const g of gains) {
      const b = g.versus;
      lines.push(
        `  ${g.load}, ${g.replicas} replicas, kv vs ${b}: prefix hit ${pct(g.prefix_hit.kv)} vs ${pct(g.prefix_hit[b])}, ` +
          `TTFT p95 ${ms(g.ttft_p95_s.kv)} vs ${ms(g.ttft_p95_s[b])} ms, goodput ${pct(g.goodput_share.kv)} vs ${pct(g.goodput_share[b])}`,
      );
    }
  }
  const t = a.cpu_tier as { policy: string; replicas: number; load: string; gpu_blocks_per_engine: number; evicted_reuse_share: number; gpu_hit_share: number; cpu_tier: { capacity_x_gpu: number; extra_hit_share: number }[]; eviction_distance_hist: { from_x_gpu: number; to_x_gpu: number | null; blocks: number }[] };
  lines.push(`Would a CPU tier help?  (${t.policy}, ${t.replicas} replicas, ${t.load}; GPU holds ${t.gpu_blocks_per_engine} blocks per engine)`);
  lines.push(`  ${pct(t.evicted_reuse_share)} of prompt blocks were needed again after their engine had evicted them (GPU hits: ${pct(t.gpu_hit_share)}).`);
  if (t.evicted_reuse_share > 0) {
    lines.push(`  An LRU CPU tier would have added to the prefix hit rate: ${t.cpu_tier.map((c) => `${c.capacity_x_gpu}× GPU → +${pct(c.extra_hit_share)}`).join(", ")}.`);
    const total = t.eviction_distance_hist.reduce((s, h) => s + h.blocks, 0);
    lines.push(`  Evictions between eviction and reuse (× GPU capacity): ${t.eviction_distance_hist.filter((h) => h.blocks > 0).map((h) => `${h.from_x_gpu}–${h.to_x_gpu ?? "∞"}: ${pct(h.blocks / total)}`).join(", ")}.`);
  } else lines.push("  No evicted block was needed again: a CPU tier would not help this workload at this capacity.");
  const need = a.replicas_needed as { by_policy: { load: string; policy: string; smallest_replicas_meeting_slo: number | null; tried: number[] }[] };
  lines.push(`How many replicas does the SLO need?  (${sloText(o.slo)}; goodput ≥ ${pct(o.targetShare)} of requests)`);
  for (const n of need.by_policy) {
    lines.push(`  ${n.load}, ${n.policy}: ${n.smallest_replicas_meeting_slo === null ? `none of ${n.tried.join(", ")} meets it` : `${n.smallest_replicas_meeting_slo} (tried ${n.tried.join(", ")})`}`);
  }
  return lines.join("\n");
}

export { CPU_TIERS, DISTANCE_EDGES };
