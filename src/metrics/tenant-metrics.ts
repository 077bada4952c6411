// Per-tenant series (frontend.api_keys names; "anonymous" without keys), on HerdMetrics' registry:
// requests admitted, tokens charged (prompt + max_tokens at admission), 429s by the limit hit, and
// the time spent in herd's fair queue. Labelled by the tenant's configured name, never its key.
import { Counter, Histogram } from "prom-client";
import type { HerdMetrics } from "./herd-metrics.ts";
import { METRIC } from "./names.ts";

export class TenantMetrics {
  private readonly requests: Counter<"tenant">;
  private readonly tokens: Counter<"tenant">;
  private readonly limited: Counter<"tenant" | "limit">;
  private readonly wait: Histogram<"tenant">;

  private constructor(m: HerdMetrics) {
    const registers = [m.registry];
    this.requests = new Counter({ name: METRIC.tenantRequestsTotal, help: "Requests admitted past the tenant's limits, by tenant.", labelNames: ["tenant"], registers });
    this.tokens = new Counter({ name: METRIC.tenantTokensTotal, help: "Tokens charged to the tenant at admission (prompt + max_tokens).", labelNames: ["tenant"], registers });
    this.limited = new Counter({ name: METRIC.tenantRateLimitedTotal, help: "Requests refused with 429 by a tenant limit (requests, tokens, concurrency).", labelNames: ["tenant", "limit"], registers });
    this.wait = new Histogram({
      name: METRIC.tenantQueueWaitSeconds, help: "Time a request waited in herd's fair queue (0 when it passed at once).", labelNames: ["tenant"], registers,
      buckets: [0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    });
  }

  private static readonly of = new WeakMap<HerdMetrics, TenantMetrics>();

  /** One set per HerdMetrics (a Frontend rebuilt over the same registry reuses it). */
  static for(m: HerdMetrics): TenantMetrics {
    let t = TenantMetrics.of.get(m);
    if (!t) TenantMetrics.of.set(m, (t = new TenantMetrics(m)));
    return t;
  }

  admitted(tenant: string, tokens: number): void {
    this.requests.inc({ tenant });
    if (tokens > 0) this.tokens.inc({ tenant }, tokens);
  }

  rateLimited(tenant: string, limit: string): void {
    this.limited.inc({ tenant, limit });
  }

  waited(tenant: string, seconds: number): void {
    this.wait.observe({ tenant }, seconds);
  }
}
