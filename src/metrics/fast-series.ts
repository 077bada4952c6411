// Per-request series without prom-client's per-call work. prom-client's `inc(labels)` and
// `observe(labels, v)` validate the label names, sort them and hash the label object on every call
// (prom-client 15 lib/counter.js `incWithoutExemplar`, lib/histogram.js `observe`; `labels(...)`
// children call the same path), ~1 µs each, and herd made ~10 such calls per request. Here the
// caller names a series by a key it builds from the label values it has (e.g. model + "\0" +
// status); a call is one Map lookup and a few additions, and prom-client sees the totals:
// - TallyCounter keeps per-key deltas and adds them to its prom-client Counter in that counter's
//   `collect()`, which the registry runs at every scrape (and `get()`), so /metrics shows every
//   increment made before the scrape, under the same name, help and labels.
// - FastHistogram is a registry metric of its own whose `get()` returns what prom-client's
//   Histogram returns (the same bucket, `_sum` and `_count` rows, labels in the same order), so
//   the registry prints the same text (test/observability/fast-series.test.ts compares both).
// Label sets stay bounded as before: the callers pass bounded values (herd-metrics.ts header).
import { Counter, type Registry } from "prom-client";

interface Pending<L extends string> {
  labels: Record<L, string>;
  n: number;
  /** The prom-client series exists (an `inc(…, 0)` creates it at 0, as prom-client's does). */
  created: boolean;
}

export class TallyCounter<L extends string> {
  private readonly pending = new Map<string, Pending<L>>();
  readonly counter: Counter<L>;

  constructor(config: { name: string; help: string; labelNames: readonly L[]; registers: Registry[] }) {
    const pending = this.pending;
    this.counter = new Counter<L>({
      ...config,
      collect() {
        for (const p of pending.values()) {
          if (p.n === 0 && p.created) continue;
          this.inc(p.labels as never, p.n);
          p.n = 0;
          p.created = true;
        }
      },
    });
  }

  /** Add `n` (default 1) to the series `key` names; `labels()` is called only on its first use. */
  inc(key: string, labels: () => Record<L, string>, n = 1): void {
    // prom-client's checks, at the call as before (a bad value must not break the scrape later).
    if (!Number.isFinite(n)) throw new TypeError(`Value is not a valid number: ${n}`);
    if (n < 0) throw new Error("It is not possible to decrease a counter");
    const p = this.pending.get(key);
    if (p !== undefined) p.n += n;
    else this.pending.set(key, { labels: labels(), n, created: false });
  }
}

interface Series<L extends string> {
  labels: Record<L, string>;
  /** Observations per bucket (not cumulative); the last slot is above every bound. */
  counts: Float64Array;
  sum: number;
  count: number;
}

/** One row of prom-client's Histogram `get()`, keys in its order (getMetricsAsJSON shows them). */
interface Row {
  value: number;
  metricName: string;
  exemplar?: null;
  labels: Record<string, string | number>;
}

/** A histogram as prom-client's Histogram prints it (no exemplars, no default labels of its own). */
export class FastHistogram<L extends string> {
  readonly type = "histogram";
  readonly aggregator = "sum";
  private readonly series = new Map<string, Series<L>>();
  private readonly bounds: number[];

  constructor(
    readonly name: string,
    readonly help: string,
    buckets: readonly number[],
    registers: Registry[],
  ) {
    this.bounds = [...buckets].sort((a, b) => a - b);
    for (const r of registers) r.registerMetric(this as never);
  }

  observe(key: string, labels: () => Record<L, string>, value: number): void {
    if (!Number.isFinite(value)) throw new TypeError(`Value is not a valid number: ${value}`);
    let s = this.series.get(key);
    if (s === undefined) this.series.set(key, (s = { labels: labels(), counts: new Float64Array(this.bounds.length + 1), sum: 0, count: 0 }));
    const b = this.bounds;
    let i = 0;
    while (i < b.length && value > b[i]!) i++;
    s.counts[i]!++;
    s.sum += value;
    s.count++;
  }

  /** prom-client's Histogram `get()`: per series its buckets (cumulative, `le` first), +Inf, sum, count. */
  async get(): Promise<{ name: string; help: string; type: string; values: Row[]; aggregator: string }> {
    const values: Row[] = [];
    const bucket = `${this.name}_bucket`;
    for (const s of this.series.values()) {
      let acc = 0;
      for (let i = 0; i < this.bounds.length; i++) {
        acc += s.counts[i]!;
        values.push({ value: acc, metricName: bucket, exemplar: null, labels: { le: this.bounds[i]!, ...s.labels } });
      }
      values.push({ value: s.count, metricName: bucket, exemplar: null, labels: { le: "+Inf", ...s.labels } });
      values.push({ value: s.sum, metricName: `${this.name}_sum`, labels: { ...s.labels } });
      values.push({ value: s.count, metricName: `${this.name}_count`, labels: { ...s.labels } });
    }
    return { name: this.name, help: this.help, type: this.type, values, aggregator: this.aggregator };
  }

  reset(): void {
    this.series.clear();
  }
}
