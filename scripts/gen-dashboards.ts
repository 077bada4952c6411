// Writes the Grafana dashboards of config/observability/ (grafana-*.json) from the panel lists
// below: `bun scripts/gen-dashboards.ts`. test/observability/dashboards.test.ts checks the files
// are what this script writes and that every metric they query exists in a live herd's /metrics.
// Dashboard JSON model: https://grafana.com/docs/grafana/latest/dashboards/build-dashboards/view-dashboard-json-model/
import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";

type Unit = "s" | "reqps" | "ops" | "percentunit" | "short" | "bytes" | "none";

interface PanelSpec {
  title: string;
  unit: Unit;
  targets: [expr: string, legend: string][];
  /** `stat` shows the latest value; default a time series. */
  kind?: "stat" | "timeseries";
  description?: string;
}

interface DashboardSpec {
  file: string;
  uid: string;
  title: string;
  description: string;
  panels: PanelSpec[];
}

const SEL = 'instance=~"$instance"';
const MSEL = `${SEL}, model=~"$model"`;

export const DASHBOARDS: DashboardSpec[] = [
  {
    file: "grafana-overview.json",
    uid: "herd-overview",
    title: "herd / overview",
    description: "Traffic, latency and errors across every herd node; start here.",
    panels: [
      { title: "Ready workers per model", unit: "short", kind: "stat", targets: [[`max by (model) (herd_model_ready_workers{${MSEL}})`, "{{model}}"]] },
      { title: "Requests in flight", unit: "short", kind: "stat", targets: [[`sum(herd_frontend_in_flight{${SEL}})`, "in flight"]] },
      { title: "Request rate by model", unit: "reqps", targets: [[`sum by (model) (rate(herd_requests_total{${MSEL}}[$__rate_interval]))`, "{{model}}"]] },
      { title: "Answers by status", unit: "reqps", targets: [[`sum by (status) (rate(herd_requests_total{${MSEL}}[$__rate_interval]))`, "{{status}}"]] },
      {
        title: "TTFT percentiles",
        unit: "s",
        description: "Arrival at the frontend to the first token (recording rules herd:ttft_seconds:*).",
        targets: [[`herd:ttft_seconds:p50_5m{model=~"$model"}`, "p50 {{model}}"], [`herd:ttft_seconds:p95_5m{model=~"$model"}`, "p95 {{model}}"], [`herd:ttft_seconds:p99_5m{model=~"$model"}`, "p99 {{model}}"]],
      },
      {
        title: "ITL percentiles",
        unit: "s",
        description: "Mean time between output tokens of each request (recording rules herd:itl_seconds:*).",
        targets: [[`herd:itl_seconds:p50_5m{model=~"$model"}`, "p50 {{model}}"], [`herd:itl_seconds:p95_5m{model=~"$model"}`, "p95 {{model}}"], [`herd:itl_seconds:p99_5m{model=~"$model"}`, "p99 {{model}}"]],
      },
      {
        title: "E2E latency percentiles",
        unit: "s",
        targets: [[`herd:e2e_seconds:p50_5m{model=~"$model"}`, "p50 {{model}}"], [`herd:e2e_seconds:p95_5m{model=~"$model"}`, "p95 {{model}}"], [`herd:e2e_seconds:p99_5m{model=~"$model"}`, "p99 {{model}}"]],
      },
      { title: "5xx share", unit: "percentunit", targets: [[`herd:requests_5xx:ratio5m{model=~"$model"}`, "{{model}}"]] },
      { title: "Refused before routing, by reason", unit: "reqps", targets: [[`sum by (reason) (rate(herd_rejected_requests_total{${SEL}}[$__rate_interval]))`, "{{reason}}"]] },
      { title: "Upstream errors by kind", unit: "ops", targets: [[`sum by (kind) (rate(herd_upstream_errors_total{${SEL}}[$__rate_interval]))`, "{{kind}}"]] },
      { title: "Retries and client-side ends", unit: "ops", targets: [[`sum by (reason) (rate(herd_retries_total{${MSEL}}[$__rate_interval]))`, "retry {{reason}}"], [`sum by (outcome, phase) (rate(herd_client_failures_total{${MSEL}}[$__rate_interval]))`, "{{outcome}} {{phase}}"]] },
    ],
  },
  {
    file: "grafana-routing-kv.json",
    uid: "herd-routing-kv",
    title: "herd / routing and KV",
    description: "Where requests go, why, and how well the KV index predicts the engines' prefix caches.",
    panels: [
      { title: "Decisions by worker", unit: "ops", targets: [[`sum by (policy, worker) (rate(herd_routing_decisions_total{${SEL}}[$__rate_interval]))`, "{{policy}} → {{worker}}"]] },
      { title: "In flight per worker", unit: "short", targets: [[`max by (worker) (herd_worker_in_flight{${MSEL}})`, "{{worker}}"]] },
      { title: "KV cache usage per worker", unit: "percentunit", targets: [[`max by (worker) (herd_worker_kv_usage_ratio{${MSEL}})`, "{{worker}}"]] },
      { title: "Prefix hit rate", unit: "percentunit", description: "Cached prompt tokens the engines reported over prompt tokens (herd:prefix_hit_ratio:rate5m).", targets: [[`herd:prefix_hit_ratio:rate5m{model=~"$model"}`, "{{model}}"]] },
      {
        title: "Cached tokens: predicted vs reported",
        unit: "ops",
        targets: [[`sum by (model) (rate(herd_predicted_cached_tokens_total{${MSEL}}[$__rate_interval]))`, "predicted {{model}}"], [`sum by (model) (rate(herd_reported_cached_tokens_total{${MSEL}}[$__rate_interval]))`, "reported {{model}}"]],
      },
      { title: "Index staleness (reported / predicted)", unit: "none", targets: [[`herd_cached_tokens_prediction_ratio{${MSEL}}`, "{{instance}} {{model}}"]] },
      { title: "Routing stage p99", unit: "s", targets: [["herd:routing_stage_seconds:p99_5m", "{{stage}}"]] },
      { title: "KV event gaps and resyncs", unit: "ops", targets: [[`sum by (worker) (rate(herd_kv_event_gaps_total{${SEL}}[$__rate_interval]))`, "gaps {{worker}}"], [`sum by (worker) (rate(herd_kv_event_resyncs_total{${SEL}}[$__rate_interval]))`, "resyncs {{worker}}"]] },
      { title: "KV ingest threads: stall time and restarts", unit: "none", targets: [[`sum by (thread) (rate(herd_kv_ingest_stall_seconds_total{${SEL}}[$__rate_interval]))`, "stalled s/s {{thread}}"], [`sum by (thread) (increase(herd_kv_ingest_thread_restarts_total{${SEL}}[$__rate_interval]))`, "restarts {{thread}}"]] },
    ],
  },
  {
    file: "grafana-pd.json",
    uid: "herd-pd",
    title: "herd / prefill-decode",
    description: "Conditional disaggregation: how often requests split, how long prefill and the KV transfer take, and the fallbacks.",
    panels: [
      { title: "Disaggregation decisions by reason", unit: "ops", targets: [[`sum by (reason) (rate(herd_pd_decisions_total{${SEL}}[$__rate_interval]))`, "{{reason}}"]] },
      { title: "Fallbacks by reason", unit: "ops", targets: [[`sum by (reason) (rate(herd_pd_fallbacks_total{${SEL}}[$__rate_interval]))`, "{{reason}}"]] },
      { title: "Prefill leg p95", unit: "s", targets: [["herd:pd_prefill_seconds:p95_5m", "prefill p95"]] },
      { title: "Transfer to first token p95", unit: "s", targets: [["herd:pd_transfer_to_first_token_seconds:p95_5m", "transfer p95"]] },
      { title: "Pairs by node", unit: "ops", targets: [[`sum by (prefill_node, decode_node) (rate(herd_pd_pairs_total{${SEL}}[$__rate_interval]))`, "{{prefill_node}} → {{decode_node}}"]] },
      { title: "Abandoned prefills", unit: "ops", targets: [[`sum by (worker) (rate(herd_pd_abandoned_prefills_total{${SEL}}[$__rate_interval]))`, "{{worker}}"]] },
    ],
  },
  {
    file: "grafana-planner.json",
    uid: "herd-planner",
    title: "herd / planner",
    description: "The leader's planner: engines wanted vs serving per pool, the demand behind it, and held requests.",
    panels: [
      { title: "Desired vs current engines", unit: "short", targets: [[`max by (pool) (herd_planner_desired_engines{${SEL}})`, "desired {{pool}}"], [`max by (pool) (herd_planner_current_engines{${SEL}})`, "current {{pool}}"]] },
      { title: "Demand (engines)", unit: "short", targets: [[`max by (pool) (herd_planner_demand_engines{${SEL}})`, "{{pool}}"]] },
      { title: "Held requests", unit: "short", targets: [[`sum by (pool) (herd_planner_held_requests{${SEL}})`, "{{pool}}"]] },
      { title: "Decisions by reason", unit: "ops", targets: [[`sum by (pool, reason) (rate(herd_planner_decisions_total{${SEL}}[$__rate_interval]))`, "{{pool}} {{reason}}"]] },
      { title: "Actions", unit: "ops", targets: [[`sum by (pool, kind, outcome) (rate(herd_planner_actions_total{${SEL}}[$__rate_interval]))`, "{{pool}} {{kind}} {{outcome}}"]] },
      {
        title: "Hold: released, rejected, mean wait",
        unit: "short",
        targets: [
          [`sum by (pool) (rate(herd_planner_hold_released_total{${SEL}}[$__rate_interval]))`, "released/s {{pool}}"],
          [`sum by (pool, reason) (rate(herd_planner_hold_rejected_total{${SEL}}[$__rate_interval]))`, "rejected/s {{pool}} {{reason}}"],
          [`sum by (pool) (rate(herd_planner_hold_wait_seconds_total{${SEL}}[$__rate_interval])) / sum by (pool) (rate(herd_planner_hold_released_total{${SEL}}[$__rate_interval]))`, "mean wait s {{pool}}"],
        ],
      },
      { title: "Planner ticks", unit: "ops", targets: [[`sum by (trigger) (rate(herd_planner_ticks_total{${SEL}}[$__rate_interval]))`, "{{trigger}}"]] },
    ],
  },
  {
    file: "grafana-tier.json",
    uid: "herd-tier",
    title: "herd / KV tier",
    description: "The CPU and SSD KV block store: fill, hit rate, evictions, integrity and its RESP server.",
    panels: [
      { title: "Fill", unit: "percentunit", targets: [[`sum by (instance, tier) (herd_kv_tier_used_bytes{${SEL}}) / sum by (instance, tier) (herd_kv_tier_capacity_bytes{${SEL}})`, "{{instance}} {{tier}}"]] },
      { title: "Used bytes", unit: "bytes", targets: [[`sum by (tier) (herd_kv_tier_used_bytes{${SEL}})`, "{{tier}}"]] },
      { title: "Objects", unit: "short", targets: [[`sum by (tier) (herd_kv_tier_objects{${SEL}})`, "{{tier}}"]] },
      { title: "Hit rate", unit: "percentunit", targets: [["herd:kv_tier_hit_ratio:rate5m", "{{tier}}"]] },
      { title: "Hits, misses, evictions", unit: "ops", targets: [[`sum by (tier) (rate(herd_kv_tier_hits_total{${SEL}}[$__rate_interval]))`, "hits {{tier}}"], [`sum by (tier) (rate(herd_kv_tier_misses_total{${SEL}}[$__rate_interval]))`, "misses {{tier}}"], [`sum by (tier) (rate(herd_kv_tier_evictions_total{${SEL}}[$__rate_interval]))`, "evictions {{tier}}"]] },
      { title: "Corrupt reads", unit: "short", kind: "stat", targets: [[`sum(increase(herd_kv_tier_corrupt_reads_total{${SEL}}[1h]))`, "last hour"]] },
      {
        title: "RESP server",
        unit: "ops",
        targets: [
          [`sum(herd_kv_tier_resp_clients{${SEL}})`, "clients"],
          [`sum(rate(herd_kv_tier_resp_commands_total{${SEL}}[$__rate_interval]))`, "commands/s"],
          [`sum by (reason) (rate(herd_kv_tier_resp_rejected_total{${SEL}}[$__rate_interval]))`, "rejected/s {{reason}}"],
          [`sum by (result) (rate(herd_kv_tier_resp_remote_lookups_total{${SEL}}[$__rate_interval]))`, "peer lookups/s {{result}}"],
        ],
      },
    ],
  },
  {
    file: "grafana-cluster.json",
    uid: "herd-cluster",
    title: "herd / cluster",
    description: "Membership, leadership and the engines' health on every node.",
    panels: [
      { title: "Leader", unit: "short", kind: "stat", targets: [[`herd_cluster_is_leader{${SEL}} == 1`, "{{instance}}"]] },
      { title: "Term", unit: "short", targets: [[`herd_cluster_term{${SEL}}`, "{{instance}}"]] },
      { title: "Members by state", unit: "short", targets: [[`max by (state) (herd_cluster_nodes{${SEL}})`, "{{state}}"]] },
      { title: "Workers by state", unit: "short", targets: [[`sum by (state) (herd_worker_state{${SEL}})`, "{{state}}"]] },
      { title: "Engine restarts (1 h)", unit: "short", targets: [[`sum by (worker) (increase(herd_engine_restarts_total{${SEL}}[1h]))`, "{{worker}}"]] },
      { title: "Requests in flight per node", unit: "short", targets: [[`herd_frontend_in_flight{${SEL}}`, "{{instance}}"]] },
      // Time left on the certificates the TLS listeners present (alert HerdTlsCertExpiringSoon: < 14 days).
      { title: "TLS certificate time left", unit: "s", kind: "stat", targets: [[`herd_tls_cert_expiry_timestamp_seconds{${SEL}} - time()`, "{{instance}} {{listener}}"]] },
    ],
  },
];

function panel(p: PanelSpec, i: number): Record<string, unknown> {
  const kind = p.kind ?? "timeseries";
  const w = kind === "stat" ? 6 : 12;
  // Stats two to a half row, time series two to a row, in order.
  return {
    id: i + 1,
    type: kind,
    title: p.title,
    ...(p.description ? { description: p.description } : {}),
    datasource: { type: "prometheus", uid: "${datasource}" },
    gridPos: { h: kind === "stat" ? 4 : 8, w, x: 0, y: 0 },
    fieldConfig: { defaults: { unit: p.unit }, overrides: [] },
    options: kind === "stat" ? { reduceOptions: { calcs: ["lastNotNull"], fields: "", values: false }, colorMode: "value" } : { legend: { displayMode: "list", placement: "bottom" }, tooltip: { mode: "multi" } },
    targets: p.targets.map(([expr, legendFormat], j) => ({ refId: String.fromCharCode(65 + j), datasource: { type: "prometheus", uid: "${datasource}" }, expr, legendFormat })),
  };
}

/** Lay panels out left to right, wrapping at Grafana's 24 columns. */
function layout(panels: Record<string, unknown>[]): void {
  let x = 0;
  let y = 0;
  let rowH = 0;
  for (const p of panels) {
    const g = p.gridPos as { h: number; w: number; x: number; y: number };
    if (x + g.w > 24) {
      x = 0;
      y += rowH;
      rowH = 0;
    }
    g.x = x;
    g.y = y;
    x += g.w;
    rowH = Math.max(rowH, g.h);
  }
}

export function dashboardJson(d: DashboardSpec): Record<string, unknown> {
  const panels = d.panels.map(panel);
  layout(panels);
  const query = (name: string, label: string, q: string) => ({
    name, label, type: "query", datasource: { type: "prometheus", uid: "${datasource}" }, query: { query: q, refId: name }, definition: q,
    includeAll: true, multi: true, allValue: ".*", current: { text: "All", value: "$__all" }, refresh: 2, sort: 1,
  });
  return {
    uid: d.uid,
    title: d.title,
    description: d.description,
    tags: ["herd"],
    editable: true,
    schemaVersion: 39,
    time: { from: "now-1h", to: "now" },
    refresh: "30s",
    templating: {
      list: [
        { name: "datasource", label: "Prometheus", type: "datasource", query: "prometheus", current: {} },
        query("instance", "node", "label_values(herd_frontend_in_flight, instance)"),
        query("model", "model", "label_values(herd_model_ready_workers, model)"),
      ],
    },
    panels,
  };
}

export const OBSERVABILITY_DIR = resolve(import.meta.dir, "../config/observability");

export function renderDashboards(): Map<string, string> {
  return new Map(DASHBOARDS.map((d) => [d.file, `${JSON.stringify(dashboardJson(d), null, 2)}\n`]));
}

if (import.meta.main) {
  for (const [file, text] of renderDashboards()) writeFileSync(join(OBSERVABILITY_DIR, file), text);
  console.log(`wrote ${DASHBOARDS.length} dashboards to ${OBSERVABILITY_DIR}`);
}
