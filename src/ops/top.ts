// `herd top`'s frame, pure: two readings of a node (GET /admin/cluster and its /metrics text) in,
// the screen's lines out. Rates are counter deltas over the time between the readings; latency
// percentiles come from the histogram buckets' deltas over the same span, interpolated within a
// bucket the way Prometheus' histogram_quantile does (prometheus/prometheus promql/quantile.go).
import { parsePromText } from "../engine/telemetry/prom-text.ts";
import { METRIC } from "../metrics/names.ts";
import type { ClusterView } from "./client.ts";
import { renderTable } from "./status.ts";

const NAMES: ReadonlySet<string> = new Set([
  METRIC.requestsTotal,
  METRIC.rejectedTotal,
  METRIC.retriesTotal,
  ...[METRIC.ttftSeconds, METRIC.e2eSeconds].flatMap((h) => [`${h}_bucket`, `${h}_sum`, `${h}_count`]),
]);

/** Cumulative histogram buckets of one model: upper bound → count (+Inf last). */
type Buckets = Map<number, number>;

/** The counters of one /metrics reading that `herd top` turns into rates. */
export interface Reading {
  atMs: number;
  /** herd_requests_total per worker: all, and answered with a 5xx. */
  byWorker: Map<string, { requests: number; errors: number }>;
  byModel: Map<string, number>;
  requests: number;
  errors: number;
  rejected: number;
  retries: number;
  ttft: Map<string, Buckets>;
  e2e: Map<string, Buckets>;
}

export function readMetrics(text: string, atMs: number): Reading {
  const r: Reading = { atMs, byWorker: new Map(), byModel: new Map(), requests: 0, errors: 0, rejected: 0, retries: 0, ttft: new Map(), e2e: new Map() };
  for (const s of parsePromText(text, { names: NAMES }).samples) {
    if (s.name === METRIC.requestsTotal) {
      const err = Number(s.labels.status) >= 500 ? s.value : 0;
      r.requests += s.value;
      r.errors += err;
      const model = s.labels.model ?? "";
      if (model !== "") r.byModel.set(model, (r.byModel.get(model) ?? 0) + s.value);
      const w = s.labels.worker ?? "";
      if (w === "") continue; // refused before any worker
      const cur = r.byWorker.get(w) ?? { requests: 0, errors: 0 };
      cur.requests += s.value;
      cur.errors += err;
      r.byWorker.set(w, cur);
    } else if (s.name === METRIC.rejectedTotal) r.rejected += s.value;
    else if (s.name === METRIC.retriesTotal) r.retries += s.value;
    else if (s.name.endsWith("_bucket")) {
      const into = s.name.startsWith(METRIC.ttftSeconds) ? r.ttft : r.e2e;
      const model = s.labels.model ?? "";
      const le = s.labels.le === "+Inf" ? Infinity : Number(s.labels.le);
      if (!Number.isFinite(le) && le !== Infinity) continue;
      const b = into.get(model) ?? new Map<number, number>();
      b.set(le, s.value);
      into.set(model, b);
    }
  }
  return r;
}

/** The q-quantile (0..1) of the observations between two cumulative readings; null when none. */
export function quantileBetween(prev: Buckets | undefined, cur: Buckets | undefined, q: number): number | null {
  if (!cur) return null;
  const bounds = [...cur.keys()].sort((a, b) => a - b);
  const counts = bounds.map((le) => (cur.get(le) ?? 0) - (prev?.get(le) ?? 0));
  const total = counts[counts.length - 1] ?? 0;
  if (total <= 0) return null;
  const rank = q * total;
  for (let i = 0; i < bounds.length; i++) {
    if (counts[i]! < rank) continue;
    const hi = bounds[i]!;
    const lo = i === 0 ? 0 : bounds[i - 1]!;
    if (hi === Infinity) return lo; // beyond the last finite bound: its bound, as Prometheus answers
    const below = i === 0 ? 0 : counts[i - 1]!;
    const inBucket = counts[i]! - below;
    return inBucket <= 0 ? hi : lo + (hi - lo) * ((rank - below) / inBucket);
  }
  return null;
}

const dash = "-";
const rate = (cur: number, prev: number | undefined, s: number) => (s > 0 ? Math.max(0, cur - (prev ?? cur)) / s : 0);
const fixed = (x: number) => x.toFixed(1);
const pct = (x: number | null) => (x === null ? dash : `${Math.round(x * 100)}%`);
const num = (x: number | null | undefined) => (x === null || x === undefined ? dash : String(x));

/** Seconds as "850 ms" / "2.4 s". */
export function duration(s: number | null): string {
  if (s === null) return dash;
  return s < 1 ? `${Math.round(s * 1000)} ms` : `${s.toFixed(1)} s`;
}

export interface Frame {
  view: ClusterView;
  cur: Reading;
  /** The reading before (null on the first frame: rates are 0). */
  prev: Reading | null;
  intervalMs: number;
  /** Wall-clock time shown in the title (HH:MM:SS). */
  clock: string;
  /** The terminal's size; lines are cut to `columns`, the list to `rows`. */
  columns: number;
  rows: number;
  /** The last poll failed: shown instead of hiding the stale frame. */
  error?: string | null;
}

export function renderTop(f: Frame): string[] {
  const { view, cur, prev } = f;
  const s = prev ? (cur.atMs - prev.atMs) / 1000 : 0;
  const ready = view.workers.filter((w) => w.state === "ready").length;
  const lines: string[] = [];
  const title = [
    `herd top  node ${view.node}`,
    `policy ${view.policy}`,
    `workers ${ready}/${view.workers.length} ready`,
    ...(view.in_flight !== undefined ? [`in-flight ${view.in_flight}`] : []),
    ...(view.leader !== undefined ? [`leader ${view.leader ?? "(none)"} term ${view.term ?? 0}`] : []),
    ...(view.draining ? ["DRAINING"] : []),
  ].join("  ");
  lines.push(`${title}  ${f.clock}`);
  lines.push(
    [`requests ${fixed(rate(cur.requests, prev?.requests, s))}/s`, `5xx ${fixed(rate(cur.errors, prev?.errors, s))}/s`, `rejected ${fixed(rate(cur.rejected, prev?.rejected, s))}/s`, `retries ${fixed(rate(cur.retries, prev?.retries, s))}/s`, prev ? `(last ${s.toFixed(1)} s)` : "(measuring…)"].join("  "),
  );
  if (f.error) lines.push(`! ${f.error}`);
  lines.push("");
  const models = [...new Set([...view.workers.map((w) => w.model), ...cur.byModel.keys()])].sort();
  const q = (m: Map<string, Buckets>, pm: Map<string, Buckets> | undefined, model: string, x: number) => duration(prev ? quantileBetween(pm?.get(model), m.get(model), x) : null);
  lines.push(
    ...renderTable([
      ["MODEL", "REQ/S", "TTFT P50", "TTFT P95", "E2E P50", "E2E P95"],
      ...models.map((m) => [m, fixed(rate(cur.byModel.get(m) ?? 0, prev?.byModel.get(m) ?? 0, s)), q(cur.ttft, prev?.ttft, m, 0.5), q(cur.ttft, prev?.ttft, m, 0.95), q(cur.e2e, prev?.e2e, m, 0.5), q(cur.e2e, prev?.e2e, m, 0.95)]),
    ]).split("\n"),
  );
  lines.push("");
  const rows = view.workers.map((w) => {
    const c = cur.byWorker.get(w.id);
    const p = prev?.byWorker.get(w.id);
    return [w.id, w.node, w.state, w.role, w.model, num(w.load.in_flight), num(w.load.running), num(w.load.waiting), pct(w.load.kv_usage), fixed(rate(c?.requests ?? 0, p?.requests ?? 0, s)), fixed(rate(c?.errors ?? 0, p?.errors ?? 0, s)), String(w.restarts)];
  });
  const table = renderTable([["WORKER", "NODE", "STATE", "ROLE", "MODEL", "IN-FLIGHT", "RUNNING", "WAITING", "KV", "REQ/S", "5XX/S", "RESTARTS"], ...rows]).split("\n");
  const room = Math.max(1, f.rows - lines.length - 2);
  lines.push(...(table.length > room ? [...table.slice(0, room - 1), `… ${table.length - room + 1} more workers`] : table));
  lines.push("", `q quit · every ${f.intervalMs} ms`);
  return lines.slice(0, Math.max(1, f.rows)).map((l) => (l.length > f.columns ? l.slice(0, Math.max(0, f.columns - 1)) + "…" : l));
}
