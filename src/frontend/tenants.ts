// Tenants: who a bearer key belongs to, and the limits it runs under. `frontend.api_keys` entries are
// bare keys (a tenant without limits, named tenant-<index>) or objects { key | key_file, name, rpm,
// tpm, concurrency, priority }. Keys are compared through SHA-256 digests with timingSafeEqual
// (as src/http/auth.ts), and only the tenant's name ever reaches metrics and logs.
//
// Limits: requests and tokens per minute as token buckets refilled continuously (capacity = the
// per-minute limit, as OpenAI describes its limits) — on one node a local Bucket, in a cluster a
// lease of the leader's bucket (`SharedBudgets`, src/cluster/quota.ts; docs/tenants.md "Counting
// across nodes"); concurrency stays per node. Tokens charged at admission as prompt tokens + max_tokens; `concurrency` caps requests in
// flight. A refusal is 429 `rate_limit_exceeded` with OpenAI's headers (x-ratelimit-limit-*,
// -remaining-*, -reset-* for requests and tokens) and Retry-After; the same headers go on every
// answer for a key with a limit.
import { RefillBucket } from "../core/refill-bucket.ts";
import { createHash, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import type { Clock } from "../core/clock.ts";
import { HerdError } from "../core/errors.ts";
import type { ApiKeyEntry } from "../config/types.ts";
import { bearer } from "../http/auth.ts";

export interface Tenant {
  name: string;
  rpm: number;
  tpm: number;
  concurrency: number;
  priority: number;
}

/** The tenant of every request when no key is configured (no limits). */
export const ANONYMOUS: Tenant = { name: "anonymous", rpm: 0, tpm: 0, concurrency: 0, priority: 0 };

const digest = (s: string) => createHash("sha256").update(s).digest();

/** One limit of one key: what admission may spend now, and what the x-ratelimit-* headers say. */
export interface Budget {
  canTake(nowMs: number, n: number): boolean;
  take(nowMs: number, n: number): void;
  remaining(nowMs: number): number;
  waitMs(nowMs: number, n: number): number;
  resetMs(nowMs: number): number;
}

/** Budgets counted cluster-wide (src/cluster/quota.ts QuotaLeases): told the limits on every rebuild. */
export interface SharedBudgets {
  configure(limits: readonly { tenant: string; kind: "requests" | "tokens"; perMinute: number }[], nowMs: number): void;
  budget(tenant: string, kind: "requests" | "tokens"): Budget | null;
}

/** A key's limit in the shared budgets, looked up at each use (a reload reconfigures them). */
function sharedBudget(shared: SharedBudgets, tenant: string, kind: "requests" | "tokens"): Budget {
  return {
    canTake: (t, n) => shared.budget(tenant, kind)?.canTake(t, n) ?? false,
    take: (t, n) => shared.budget(tenant, kind)?.take(t, n),
    remaining: (t) => shared.budget(tenant, kind)?.remaining(t) ?? 0,
    waitMs: (t, n) => shared.budget(tenant, kind)?.waitMs(t, n) ?? 1000,
    resetMs: (t) => shared.budget(tenant, kind)?.resetMs(t) ?? 0,
  };
}

/** A continuously refilled bucket of `perMinute` units (core/refill-bucket.ts) as a tenant's Budget. */
class Bucket extends RefillBucket implements Budget {
  /** Units available now. */
  remaining(nowMs: number): number {
    return Math.floor(this.at(nowMs));
  }
  /** ms until `n` units are available (0 if now). */
  waitMs(nowMs: number, n: number): number {
    const level = this.at(nowMs);
    return level >= n ? 0 : Math.ceil(((n - level) * 60_000) / this.perMinute);
  }
  /** ms until the bucket is full again (OpenAI's x-ratelimit-reset-*). */
  resetMs(nowMs: number): number {
    return Math.ceil(((this.perMinute - this.at(nowMs)) * 60_000) / this.perMinute);
  }
  canTake(nowMs: number, n: number): boolean {
    return this.at(nowMs) >= n;
  }
  take(_nowMs: number, n: number): void {
    this.level -= n;
  }
}

/** OpenAI's reset format: "20ms", "1.5s", "6m0s". */
export function resetText(ms: number): string {
  if (ms < 1000) return `${Math.max(0, Math.ceil(ms))}ms`;
  const s = ms / 1000;
  if (s < 60) return `${Number(s.toFixed(3))}s`;
  return `${Math.floor(s / 60)}m${Math.round(s % 60)}s`;
}

interface State {
  tenant: Tenant;
  requests: Budget | null;
  tokens: Budget | null;
  inFlight: number;
}

/** Why a request was refused: the limit it hit (a metrics label). */
export type LimitKind = "requests" | "tokens" | "concurrency";

/** No keys, or a request without one: nothing to free, no headers (one shared object, not three per request). */
export const ADMITTED_ANONYMOUS: Admitted = Object.freeze({ tenant: ANONYMOUS, headers: Object.freeze({}) as Record<string, string>, release: () => {} });

export interface Admitted {
  tenant: Tenant;
  /** x-ratelimit-* headers for this answer (empty for a tenant without limits). */
  headers: Record<string, string>;
  /** Frees the concurrency slot; call exactly once when the request is over. */
  release(): void;
}

export class Tenants {
  private readonly keyed: { digest: Buffer; state: State }[] = [];

  constructor(
    entries: readonly (string | ApiKeyEntry)[],
    private readonly clock: Clock,
    readFile: (path: string) => string = (p) => readFileSync(p, "utf8"),
    shared?: SharedBudgets,
  ) {
    const limits: { tenant: string; kind: "requests" | "tokens"; perMinute: number }[] = [];
    const budget = (name: string, kind: "requests" | "tokens", perMinute: number, now: number): Budget | null => {
      if (perMinute <= 0) return null;
      if (!shared) return new Bucket(perMinute, now);
      limits.push({ tenant: name, kind, perMinute });
      return sharedBudget(shared, name, kind);
    };
    entries.forEach((e, i) => {
      const t: ApiKeyEntry = typeof e === "string" ? { key: e, key_file: "", name: "", rpm: 0, tpm: 0, concurrency: 0, priority: 0 } : e;
      const key = t.key !== "" ? t.key : t.key_file !== "" ? readFile(t.key_file).trim() : "";
      if (key === "") return;
      const tenant: Tenant = { name: t.name || `tenant-${i}`, rpm: t.rpm, tpm: t.tpm, concurrency: t.concurrency, priority: t.priority };
      const now = clock.now();
      this.keyed.push({
        digest: digest(key),
        state: { tenant, requests: budget(tenant.name, "requests", t.rpm, now), tokens: budget(tenant.name, "tokens", t.tpm, now), inFlight: 0 },
      });
    });
    shared?.configure(limits, clock.now());
  }

  /** Keys are configured: /v1/* needs one. */
  get enabled(): boolean {
    return this.keyed.length > 0;
  }

  /** Every tenant's name (for metrics). */
  names(): string[] {
    return [...new Set(this.keyed.map((k) => k.state.tenant.name))];
  }

  /** The state of the key in an Authorization header; null when it carries none of the keys. */
  private find(authorization: string | null | undefined): State | null {
    const token = bearer(authorization);
    if (token === null) return null;
    const d = digest(token);
    let found: State | null = null;
    // Every digest is compared (no early exit), so timing says nothing about which key matched.
    for (const k of this.keyed) if (timingSafeEqual(k.digest, d) && found === null) found = k.state;
    return found;
  }

  /** The tenant of a request (ANONYMOUS without keys), or null for a missing/wrong key (→ 401). */
  identify(authorization: string | null | undefined): Tenant | null {
    if (!this.enabled) return ANONYMOUS;
    return this.find(authorization)?.tenant ?? null;
  }

  /**
   * Charge a request of `tokens` to its key's limits; throws the 429 (with headers) when one is
   * exhausted. Without keys, or for a tenant without limits, always admits.
   */
  admit(authorization: string | null | undefined, tokens: number): Admitted {
    const s = this.enabled ? this.find(authorization) : null;
    if (!s) return ADMITTED_ANONYMOUS;
    const now = this.clock.now();
    const t = s.tenant;
    const refuse = (kind: LimitKind, message: string, waitMs: number): never => {
      const headers = { ...this.headers(s, now), "retry-after": String(Math.max(1, Math.ceil(waitMs / 1000))) };
      throw new TenantLimited(kind, t, new HerdError(429, "rate_limit_error", message, "rate_limit_exceeded", null, headers));
    };
    if (t.concurrency > 0 && s.inFlight >= t.concurrency) refuse("concurrency", `Rate limit reached for ${t.name}: ${t.concurrency} requests in flight at once.`, 1000);
    if (s.requests && !s.requests.canTake(now, 1))
      refuse("requests", `Rate limit reached for ${t.name} on requests per min (RPM): Limit ${t.rpm}. Please try again in ${resetText(s.requests.waitMs(now, 1))}.`, s.requests.waitMs(now, 1));
    if (s.tokens) {
      // A request bigger than the whole budget would never pass: it is charged what is left.
      const need = Math.min(tokens, t.tpm);
      if (!s.tokens.canTake(now, need))
        refuse("tokens", `Rate limit reached for ${t.name} on tokens per min (TPM): Limit ${t.tpm}, Requested ${tokens}. Please try again in ${resetText(s.tokens.waitMs(now, need))}.`, s.tokens.waitMs(now, need));
      s.tokens.take(now, need);
    }
    s.requests?.take(now, 1);
    s.inFlight++;
    let released = false;
    return {
      tenant: t,
      headers: this.headers(s, now),
      release: () => {
        if (released) return;
        released = true;
        s.inFlight--;
      },
    };
  }

  /** OpenAI's x-ratelimit-* headers of a key (only for the limits it has). */
  private headers(s: State, now: number): Record<string, string> {
    const h: Record<string, string> = {};
    if (s.requests) {
      h["x-ratelimit-limit-requests"] = String(s.tenant.rpm);
      h["x-ratelimit-remaining-requests"] = String(Math.max(0, s.requests.remaining(now)));
      h["x-ratelimit-reset-requests"] = resetText(s.requests.resetMs(now));
    }
    if (s.tokens) {
      h["x-ratelimit-limit-tokens"] = String(s.tenant.tpm);
      h["x-ratelimit-remaining-tokens"] = String(Math.max(0, s.tokens.remaining(now)));
      h["x-ratelimit-reset-tokens"] = resetText(s.tokens.resetMs(now));
    }
    return h;
  }

  /** The limit headers of a key right now (the 401/400 path has none: no tenant). */
  headersFor(authorization: string | null | undefined): Record<string, string> {
    const s = this.enabled ? this.find(authorization) : null;
    return s ? this.headers(s, this.clock.now()) : {};
  }
}

/** A request over one of its tenant's limits: the 429 to answer, and what for (metrics). */
export class TenantLimited extends Error {
  constructor(
    readonly kind: LimitKind,
    readonly tenant: Tenant,
    readonly error: HerdError,
  ) {
    super(error.message);
  }
}
