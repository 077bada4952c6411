// `herd planner status` output: per pool, desired vs actual engines, the last decision's reason and
// the figures it read, held requests and the recent actions, from GET /admin/planner
// (src/planner/status.ts). Pure: the JSON in, text out.
import { renderTable } from "./status.ts";

/** The JSON of GET /admin/planner (the fields this view reads). */
export interface PlannerView {
  enabled: boolean;
  dry_run: boolean;
  tick_ms: number;
  ticks: number;
  last_tick_ms_ago: number | null;
  held: { requests: number; bytes: number };
  pools: {
    pool: string;
    entry: number;
    desired: number | null;
    actual: Record<string, number>;
    reason: string | null;
    terms: Record<string, number | null>;
    /** SLA mode's sizing, term by term (planner.slo). */
    explain?: string;
    held: { requests: number; oldest_wait_ms: number | null };
    predicted_ready_ms: number | null;
  }[];
  recent_actions: { action: string; reason: string; outcome: string; detail: string | null; ms_ago: number }[];
  /** The cluster's planner (src/planner/cluster-wire.ts); absent from an older herd. */
  planner_node?: string | null;
  term?: number;
  waiting_for?: string | null;
  leader_unreachable?: boolean;
  cluster_pools?: { pool: string; desired: number | null; actual: number; reason: string | null; explain?: string; hosts: Record<string, string[]> }[];
  assignments?: { refused: Record<string, number>; duplicates: number };
}

const dash = "-";
const secs = (ms: number | null | undefined) => (ms === null || ms === undefined ? dash : `${(ms / 1000).toFixed(ms < 10_000 ? 1 : 0)}s`);

function actualCell(a: Record<string, number>): string {
  const parts = ["ready", "starting", "waking", "sleeping", "draining"].filter((k) => (a[k] ?? 0) > 0).map((k) => `${a[k]} ${k}`);
  return parts.length ? parts.join(", ") : "none";
}

function termsCell(t: Record<string, number | null>): string {
  return ["demand", "stable", "panic", "need", "floor", "max"].filter((k) => t[k] !== undefined).map((k) => `${k}=${t[k] ?? dash}`).join(" ");
}

export function renderPlanner(v: PlannerView, recent = 10): string {
  const head = [
    v.enabled ? "planner on" : "planner OFF (planner.enabled: false)",
    ...(v.dry_run ? ["DRY RUN (actions are only logged)"] : []),
    `tick ${v.tick_ms} ms`,
    `last tick ${v.last_tick_ms_ago === null ? "never" : `${secs(v.last_tick_ms_ago)} ago`}`,
    `held ${v.held.requests}`,
  ].join("  ");
  if (v.pools.length === 0) return `${head}\n(no pools: planner.pools is empty)`;
  const cluster = clusterLines(v);
  const rows = [
    ["POOL", "ENTRY", "DESIRED", "ACTUAL", "REASON", "HELD", "OLDEST", "READY IN", "TERMS"],
    ...v.pools.map((p) => [
      p.pool, `engines[${p.entry}]`, p.desired === null ? dash : String(p.desired), actualCell(p.actual), p.reason ?? dash,
      String(p.held.requests), secs(p.held.oldest_wait_ms), secs(p.predicted_ready_ms), termsCell(p.terms),
    ]),
  ];
  const lines = [head, ...cluster, renderTable(rows)];
  // SLA mode: why each pool has the size it has, term by term (the leader's, else this node's).
  const explained = [...(v.cluster_pools ?? []), ...v.pools].filter((p, i, all) => p.explain && all.findIndex((q) => q.pool === p.pool && q.explain) === i);
  if (explained.length) {
    lines.push("", "SLA sizing:");
    for (const p of explained) lines.push(`  ${p.pool}: ${p.explain!.split("; ").join("\n    ")}`);
  }
  const last = v.recent_actions.slice(-recent);
  if (last.length) {
    lines.push("", "recent actions (newest last):");
    for (const a of last) lines.push(`  ${secs(a.ms_ago)} ago  ${a.action}  (${a.reason}) ${a.outcome}${a.detail ? `: ${a.detail}` : ""}`);
  }
  return lines.join("\n");
}

/** Who plans for the cluster, in which term, and per pool which host runs what. */
function clusterLines(v: PlannerView): string[] {
  if (v.planner_node === undefined) return [];
  const refused = Object.entries(v.assignments?.refused ?? {}).filter(([, n]) => n > 0).map(([k, n]) => `${k}=${n}`).join(" ");
  const out = [
    `cluster planner: ${v.planner_node ?? "none (no leader)"}  term ${v.term ?? 0}${v.leader_unreachable ? "  (leader unreachable: this node's own view)" : ""}${v.waiting_for ? `  waiting: ${v.waiting_for}` : ""}${refused ? `  refused: ${refused}` : ""}`,
  ];
  if (v.cluster_pools?.length) {
    const rows = [["POOL", "DESIRED", "ACTUAL", "REASON", "HOSTS"], ...v.cluster_pools.map((p) => [p.pool, p.desired === null ? dash : String(p.desired), String(p.actual), p.reason ?? dash, Object.entries(p.hosts).map(([h, es]) => `${h}: ${es.join(",")}`).join("; ") || "none"])];
    out.push(renderTable(rows), "");
  }
  return out;
}
