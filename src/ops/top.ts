// `herd top`: a live terminal view of the node's workers and request rates, redrawn every interval
// from GET /admin/cluster and GET /admin/requests (the decision records, src/request/record.ts).
// The frame is a pure function of those two answers (renderTop), so tests render fixed views; the
// loop owns the terminal: alternate screen, hidden cursor, `q` or Ctrl-C to quit, restored on exit.
import type { Clock } from "../core/clock.ts";
import type { AdminClient, ClusterView, WorkerView } from "./client.ts";
import { renderTable } from "./status.ts";

/** The part of a decision record `top` reads. */
export interface TopRecord {
  timestamp: number;
  worker: string | null;
  outcome: string;
  status: number;
  error: string | null;
  input_length: number;
  cached_tokens: number | null;
  ttft_ms: number | null;
  itl_ms: number | null;
  e2e_ms: number;
}

/** Records kept for the rates and percentiles: the last minute. */
export const TOP_WINDOW_MS = 60_000;

const dash = "-";
const pct = (x: number | null) => (x === null || !Number.isFinite(x) ? dash : `${Math.round(x * 100)}%`);
const ms = (x: number | null) => (x === null ? dash : x < 1000 ? `${Math.round(x)}ms` : `${(x / 1000).toFixed(2)}s`);

function quantile(xs: number[], q: number): number | null {
  if (xs.length === 0) return null;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

interface WorkerFigures {
  rate: number;
  hits: number | null;
  errors: number;
  ttftP95: number | null;
}

function perWorker(records: readonly TopRecord[], nowMs: number): Map<string, WorkerFigures> {
  const by = new Map<string, { n: number; prompt: number; cached: number; errors: number; ttft: number[] }>();
  for (const r of records) {
    if (r.worker === null || r.timestamp < nowMs - TOP_WINDOW_MS) continue;
    const w = by.get(r.worker) ?? { n: 0, prompt: 0, cached: 0, errors: 0, ttft: [] };
    w.n++;
    if (r.cached_tokens !== null) {
      w.prompt += Math.max(r.input_length, r.cached_tokens);
      w.cached += r.cached_tokens;
    }
    if (r.outcome === "upstream_failed" || r.outcome === "broken") w.errors++;
    if (r.ttft_ms !== null) w.ttft.push(r.ttft_ms);
    by.set(r.worker, w);
  }
  const out = new Map<string, WorkerFigures>();
  for (const [id, w] of by) out.set(id, { rate: w.n / (TOP_WINDOW_MS / 1000), hits: w.prompt > 0 ? w.cached / w.prompt : null, errors: w.errors, ttftP95: quantile(w.ttft, 0.95) });
  return out;
}

/** One frame of `herd top`: the node line, the request line (last 10 s and 60 s), one row per worker. */
export function renderTop(view: ClusterView, records: readonly TopRecord[], nowMs: number, drained: ReadonlySet<string> = new Set()): string {
  const recent = (win: number) => records.filter((r) => r.timestamp >= nowMs - win);
  const minute = recent(TOP_WINDOW_MS);
  const ok = minute.filter((r) => r.outcome === "complete");
  const failed = minute.filter((r) => r.status >= 500).length;
  const col = (f: (r: TopRecord) => number | null) => ok.map(f).filter((x): x is number => x !== null);
  const ttft = col((r) => r.ttft_ms);
  const itl = col((r) => r.itl_ms);
  const e2e = col((r) => r.e2e_ms);
  const ready = view.workers.filter((w) => w.state === "ready").length;
  const lines = [
    `herd top  node ${view.node}  leader ${view.leader ?? "(none)"}  term ${view.term ?? 0}  policy ${view.policy}  workers ${ready}/${view.workers.length} ready  in-flight ${view.in_flight ?? dash}${view.draining ? "  DRAINING" : ""}`,
    `requests ${(recent(10_000).length / 10).toFixed(1)}/s (10s)  ${(minute.length / 60).toFixed(1)}/s (60s)  5xx ${failed}  ` +
      `TTFT p50 ${ms(quantile(ttft, 0.5))} p95 ${ms(quantile(ttft, 0.95))}  ITL p50 ${ms(quantile(itl, 0.5))} p95 ${ms(quantile(itl, 0.95))}  E2E p95 ${ms(quantile(e2e, 0.95))}`,
    "",
  ];
  const figures = perWorker(records, nowMs);
  const state = (w: WorkerView) => (drained.has(w.id) ? "drained" : w.state);
  const rows = [
    ["WORKER", "STATE", "IN-FLIGHT", "RUN/WAIT", "KV", "REQ/S", "PREFIX HITS", "TTFT P95", "ERRORS", "RESTARTS"],
    ...view.workers.map((w) => {
      const f = figures.get(w.id);
      return [w.id, state(w), String(w.load.in_flight), `${w.load.running ?? dash}/${w.load.waiting ?? dash}`, pct(w.load.kv_usage), f ? f.rate.toFixed(2) : "0.00", pct(f?.hits ?? null), ms(f?.ttftP95 ?? null), String(f?.errors ?? 0), String(w.restarts)];
    }),
  ];
  lines.push(renderTable(rows), "", "q quit  (last 60 s of this node's requests)");
  return lines.join("\n");
}

export interface TopTerminal {
  write(text: string): void;
  /** Calls back on each key; returns a function that stops listening. */
  onKey(fn: (key: string) => void): () => void;
}

/** Redraw every intervalMs until `q`, Ctrl-C, or `frames` frames (tests). Returns the exit code. */
export async function runTop(client: AdminClient, term: TopTerminal, clock: Clock, wallMs: () => number, o: { intervalMs: number; frames: number | null; ansi: boolean }): Promise<number> {
  let quit = false;
  const off = term.onKey((k) => {
    if (k === "q" || k === "\u0003") quit = true;
  });
  let seq = 0;
  let records: TopRecord[] = [];
  // A terminal gets the alternate screen and redraws in place; a pipe gets plain frames.
  if (o.ansi) term.write("\u001b[?1049h\u001b[?25l");
  try {
    for (let n = 0; !quit && (o.frames === null || n < o.frames); n++) {
      const view = await client.cluster();
      const got = await client.requests<TopRecord>(seq);
      if (got.seq < seq) records = [];
      seq = got.seq;
      const nowMs = got.now_ms ?? wallMs();
      records = [...records, ...got.records].filter((r) => r.timestamp >= nowMs - TOP_WINDOW_MS);
      const drained = new Set(view.workers.filter((w) => w.drained).map((w) => w.id));
      const frame = renderTop(view, records, nowMs, drained);
      term.write(o.ansi ? `\u001b[H\u001b[2J${frame.replace(/\n/g, "\r\n")}\r\n` : `${frame}\n\n`);
      if (o.frames !== null && n + 1 >= o.frames) break;
      for (let waited = 0; !quit && waited < o.intervalMs; waited += 100) await clock.sleep(Math.min(100, o.intervalMs - waited));
    }
  } finally {
    off();
    if (o.ansi) term.write("\u001b[?25h\u001b[?1049l");
  }
  return 0;
}
