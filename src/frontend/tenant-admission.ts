// One request past its tenant's limits (tenants.ts): charged, counted in the per-tenant metrics,
// its concurrency slot freed when its ticket is released, its x-ratelimit-* headers handed to the
// answer, and its priority class — the key's, or lower when the request asks for less with
// `x-herd-priority: <int>` (a request can never raise itself above its key's class).
import type { TenantMetrics } from "../metrics/tenant-metrics.ts";
import type { Ticket } from "../request/ticket.ts";
import { ADMITTED_ANONYMOUS, TenantLimited, type Tenant, type Tenants } from "./tenants.ts";

export const PRIORITY_HEADER = "x-herd-priority";

export interface TenantAdmission {
  tenants: Tenants;
  metrics: TenantMetrics;
  ticket: Ticket;
  headers: Headers;
  /** Tokens charged: prompt (estimated, or exact when hashed) + max_tokens. */
  tokens: number;
  /** Filled with the key's x-ratelimit-* headers for the answer. */
  limitHeaders: Record<string, string>;
}

/** Throws the tenant's 429 HerdError when a limit is exhausted; else the tenant, priority resolved. */
export function admitTenant(a: TenantAdmission): Tenant {
  const auth = a.headers.get("authorization");
  let adm;
  try {
    adm = a.tenants.admit(auth, a.tokens);
  } catch (e) {
    if (!(e instanceof TenantLimited)) throw e;
    a.metrics.rateLimited(e.tenant.name, e.kind);
    throw e.error;
  }
  if (adm !== ADMITTED_ANONYMOUS) {
    a.ticket.onRelease(adm.release);
    Object.assign(a.limitHeaders, adm.headers);
  }
  a.metrics.admitted(adm.tenant.name, a.tokens);
  const asked = Number.parseInt(a.headers.get(PRIORITY_HEADER) ?? "", 10);
  const priority = Number.isFinite(asked) ? Math.min(adm.tenant.priority, asked) : adm.tenant.priority;
  return { ...adm.tenant, priority };
}
