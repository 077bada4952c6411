// `herd status` output: a readable table of this node's workers from GET /admin/cluster. Pure:
// the JSON in, text out (the command fetches; tests render fixed views).
import type { KvStreamView } from "../kv/consumer.ts";
import type { ClusterView, NodeView, WorkerView } from "./client.ts";

const dash = "-";

function num(n: number | null | undefined): string {
  return n === null || n === undefined ? dash : String(n);
}

function pct(x: number | null | undefined): string {
  return x === null || x === undefined ? dash : `${Math.round(x * 100)}%`;
}

/** The KV event stream in a few words: connected or not, last sequence, blocks indexed, trouble seen. */
export function kvSummary(kv: KvStreamView | null): string {
  if (!kv) return dash;
  const parts = [kv.connected ? "connected" : "disconnected"];
  if (kv.last_seq !== null) parts.push(`seq ${kv.last_seq}`);
  parts.push(`${kv.blocks} blocks`);
  const trouble = [
    kv.gaps ? `${kv.gaps} gaps` : "",
    kv.replay_failures ? `${kv.replay_failures} replay failures` : "",
    kv.decode_errors ? `${kv.decode_errors} decode errors` : "",
  ].filter(Boolean);
  return [...parts, ...trouble].join(", ");
}

const COLUMNS: { head: string; cell: (w: WorkerView) => string }[] = [
  { head: "WORKER", cell: (w) => w.id },
  { head: "STATE", cell: (w) => w.state },
  { head: "ROLE", cell: (w) => w.role },
  { head: "MODEL", cell: (w) => w.model },
  { head: "IN-FLIGHT", cell: (w) => num(w.load.in_flight) },
  { head: "RUNNING", cell: (w) => num(w.load.running) },
  { head: "WAITING", cell: (w) => num(w.load.waiting) },
  { head: "KV", cell: (w) => pct(w.load.kv_usage) },
  { head: "RESTARTS", cell: (w) => String(w.restarts) },
  { head: "PID", cell: (w) => num(w.pid) },
  { head: "KV EVENTS", cell: (w) => kvSummary(w.kv_events) },
];

export function renderTable(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join("  ").trimEnd()).join("\n");
}

const NODE_COLUMNS: { head: string; cell: (n: NodeView, leader: string | null) => string }[] = [
  { head: "NODE", cell: (n, leader) => (n.name === leader ? `${n.name} (leader)` : n.name) },
  { head: "ADDRESS", cell: (n) => n.address },
  { head: "STATE", cell: (n) => n.state },
  { head: "LAST SEEN", cell: (n) => `${Math.round(n.last_seen_ms)} ms ago` },
];

/** The cluster lines: discovery, leader and term, then one row per node (absent for herds without a cluster view). */
export function renderNodes(view: ClusterView): string | null {
  if (view.nodes === undefined) return null;
  const leader = view.leader ?? null;
  const head = [`cluster ${view.discovery ?? dash}`, `leader ${leader ?? "(none)"}`, `term ${view.term ?? 0}`, `nodes ${view.nodes.length}`];
  // A node cut off from etcd / the voters says so: its leader and node rows may be out of date.
  if (view.view_stale) head.push("VIEW STALE (cannot reach etcd / a quorum: local workers first)");
  if (view.nodes.length <= 1) return head.join("  "); // one node: the line says it all
  return `${head.join("  ")}\n${renderTable([NODE_COLUMNS.map((c) => c.head), ...view.nodes.map((n) => NODE_COLUMNS.map((c) => c.cell(n, leader)))])}`;
}

export function renderStatus(view: ClusterView): string {
  const ready = view.workers.filter((w) => w.state === "ready").length;
  const head = [
    `node ${view.node}`,
    `policy ${view.policy}`,
    `workers ${ready}/${view.workers.length} ready`,
    ...(view.in_flight !== undefined ? [`in-flight ${view.in_flight}`] : []),
    ...(view.draining ? ["DRAINING (shutting down)"] : []),
  ].join("  ");
  const nodes = renderNodes(view);
  const top = nodes === null ? head : `${head}\n${nodes}${nodes.includes("\n") ? "\n" : ""}`;
  if (view.workers.length === 0) return `${top}\n(no workers)`;
  const rows = [COLUMNS.map((c) => c.head), ...view.workers.map((w) => COLUMNS.map((c) => c.cell(w)))];
  // A crashing or failed worker's cause goes on a line of its own under its row: the engine's last
  // error line is too long for a column, and it is what an operator looks for first.
  const lines = renderTable(rows).split("\n");
  const out = [lines[0]!];
  view.workers.forEach((w, i) => {
    out.push(lines[i + 1]!);
    if (w.last_error && w.state !== "ready") out.push(`  last error: ${w.last_error}`);
  });
  return `${top}\n${out.join("\n")}`;
}
