// Per-tenant series (frontend.api_keys names; "anonymous" without keys), on HerdMetrics' registry:
// requests admitted, tokens charged (prompt + max_tokens at admission), 429s by the limit hit, and
// the time spent in herd's fair queue. Labelled by the tenant's configured name, never its key.
import { Counter } from "prom-client";
import { FastHistogram, TallyCounter } from "./fast-series.ts";
import type { HerdMetrics } from "./herd-metrics.ts";
import { METRIC } from "./names.ts";

export class TenantMetrics {
  // Per request: no prom-client label hashing (fast-series.ts).
  private readonly requests: TallyCounter<"tenant">;
  private readonly tokens: TallyCounter<"tenant">;
  private readonly limited: Counter<"tenant" | "limit">;
  private readonly wait: FastHistogram<"tenant">;

  private constructor(m: HerdMetrics) {
    const registers = [m.registry];
    this.requests = new TallyCounter({ name: METRIC.tenantRequestsTotal, help: "Requests admitted past the tenant's limits, by tenant.", labelNames: ["tenant"], registers });
    this.tokens = new TallyCounter({ name: METRIC.tenantTokensTotal, help: "Tokens charged to the tenant at admission (prompt + max_tokens).", labelNames: ["tenant"], registers });
    this.limited = new Counter({ name: METRIC.tenantRateLimitedTotal, help: "Requests refused with 429 by a tenant limit (requests, tokens, concurrency).", labelNames: ["tenant", "limit"], registers });
    this.wait = new FastHistogram<"tenant">(METRIC.tenantQueueWaitSeconds, "Time a request waited in herd's fair queue (0 when it passed at once).", [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], registers);
  }

  private static readonly of = new WeakMap<HerdMetrics, TenantMetrics>();

  /** One set per HerdMetrics (a Frontend rebuilt over the same registry reuses it). */
  static for(m: HerdMetrics): TenantMetrics {
    let t = TenantMetrics.of.get(m);
    if (!t) TenantMetrics.of.set(m, (t = new TenantMetrics(m)));
    return t;
  }

  admitted(tenant: string, tokens: number): void {
    const labels = () => ({ tenant });
    this.requests.inc(tenant, labels);
    if (tokens > 0) this.tokens.inc(tenant, labels, tokens);
  }

  rateLimited(tenant: string, limit: string): void {
    this.limited.inc({ tenant, limit });
  }

  waited(tenant: string, seconds: number): void {
    this.wait.observe(tenant, () => ({ tenant }), seconds);
  }
}
