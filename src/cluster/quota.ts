// Cluster-wide tenant budgets (docs/tenants.md "Counting across nodes"): the pure counting core.
// The leader's QuotaLedger owns each key's true bucket (requests and tokens per minute, refilled
// continuously as src/frontend/tenants.ts does on one node) and hands every node a *lease* of units;
// a node's QuotaLeases spends its lease locally, so the request path never waits on the network.
// Counters on the wire are cumulative, so a lost reply or a retried ask is never counted twice:
//   ask   {node, boot, keys: [{key, per_minute, want, spent, unleased, unleased_acked}]}
//   reply {ledger, lease_ms, keys: [{key, granted, base, level, unleased}]}
// A node holds `granted − (spent − base)` units of the ledger named in the reply. A node without a
// live lease (no leader, leader unreachable for LEASE_MS) spends from a local bucket of limit / nodes
// — never unlimited, never zero — and the leader debits those `unleased` units when it hears again.
// No I/O here: quota-sync.ts carries asks to the leader; time comes from the caller's clock readings.
import { RefillBucket } from "../core/refill-bucket.ts";

export type QuotaKind = "requests" | "tokens";

/** A node's lease is void this long after the ask that got it was sent (the leader drops it after 2×). */
export const QUOTA_LEASE_MS = 2000;
/** Keys per ask (every configured key with a limit, two limits each): bounded on the wire. */
export const QUOTA_KEYS_MAX = 2048;

export interface QuotaAskKey {
  key: string;
  per_minute: number;
  want: number;
  spent: number;
  unleased: number;
  unleased_acked: number;
}
export interface QuotaAsk {
  node: string;
  boot: string;
  keys: QuotaAskKey[];
}
export interface QuotaReplyKey {
  key: string;
  granted: number;
  base: number;
  level: number;
  unleased: number;
}
export interface QuotaReply {
  ledger: string;
  keys: QuotaReplyKey[];
}

/** The key of one limit of a tenant on the wire: its name (never its API key) and the limit. */
export const quotaKey = (tenant: string, kind: QuotaKind) => `${tenant}/${kind}`;

interface NodeRecord {
  granted: number;
  base: number;
  spent: number;
  unleased: number;
}

/** The leader's side: every key's bucket and what each node (name + boot) holds of it. */
export class QuotaLedger {
  private readonly buckets = new Map<string, RefillBucket>();
  /** `${node}/${boot}` → key → record; plus when that node last asked. */
  private readonly nodes = new Map<string, { heardMs: number; keys: Map<string, NodeRecord> }>();

  constructor(
    /** Names this ledger (leader, term and a boot id): a node seeing a new one drops its old lease. */
    readonly id: string,
  ) {}

  handle(ask: QuotaAsk, nowMs: number): QuotaReply {
    this.expire(nowMs);
    const nodeId = `${ask.node}/${ask.boot}`;
    let n = this.nodes.get(nodeId);
    if (!n) this.nodes.set(nodeId, (n = { heardMs: nowMs, keys: new Map() }));
    n.heardMs = nowMs;
    const keys: QuotaReplyKey[] = [];
    for (const k of ask.keys.slice(0, QUOTA_KEYS_MAX)) {
      if (!(k.per_minute > 0)) continue;
      let b = this.buckets.get(k.key);
      if (!b) this.buckets.set(k.key, (b = new RefillBucket(k.per_minute, nowMs)));
      b.perMinute = k.per_minute; // nodes share one config; the latest ask's limit wins
      b.at(nowMs);
      let r = n.keys.get(k.key);
      if (!r) {
        // First word from this node (or from a new leader's point of view): what it spent from an
        // earlier lease is history; what it spent on its own (unleased) and nobody acked is debited.
        r = { granted: 0, base: k.spent, spent: k.spent, unleased: k.unleased_acked };
        n.keys.set(k.key, r);
      }
      r.spent = Math.max(r.spent, k.spent);
      if (k.unleased > r.unleased) {
        b.level -= k.unleased - r.unleased;
        r.unleased = k.unleased;
      }
      const outstanding = r.granted - (r.spent - r.base);
      const grant = Math.max(0, Math.min(k.want - outstanding, Math.floor(b.level)));
      b.level -= grant;
      r.granted += grant;
      keys.push({ key: k.key, granted: r.granted, base: r.base, level: Math.max(0, Math.floor(b.level)), unleased: r.unleased });
    }
    return { ledger: this.id, keys };
  }

  /** A node silent for 2 × QUOTA_LEASE_MS has stopped spending its lease (its own expiry came first). */
  private expire(nowMs: number): void {
    for (const [id, n] of this.nodes) if (nowMs - n.heardMs > 2 * QUOTA_LEASE_MS) this.nodes.delete(id);
  }

  /** Units left in a key's bucket (tests, /admin). */
  level(key: string, nowMs: number): number {
    return this.buckets.get(key)?.at(nowMs) ?? 0;
  }
}

interface Held {
  key: string;
  perMinute: number;
  spent: number;
  unleased: number;
  unleasedAcked: number;
  /** The largest single need refused lately (a request of more tokens than a share must still pass). */
  needMax: number;
  ledger: string;
  granted: number;
  base: number;
  /** The leader's bucket after the last grant (for the x-ratelimit-remaining-* estimate). */
  leaderLevel: number;
  /** The lease is void from here (the send time of the ask that got it + QUOTA_LEASE_MS). */
  validUntilMs: number;
  fallback: RefillBucket;
}

/** A node's side: its leases, and the local fallback while it has none. */
export class QuotaLeases {
  private held = new Map<string, Held>();
  private ledger = "";

  constructor(
    readonly node: string,
    readonly boot: string,
    /** Live members of the cluster, this node included (≥ 1): shares and the fallback divide by it. */
    private readonly nodes: () => number,
    /** Called when a lease runs low (the sync loop asks at once instead of at its next tick). */
    private readonly low: () => void = () => {},
  ) {}

  /** The limits in force (after a config load): keys no longer configured are forgotten. */
  configure(limits: readonly { tenant: string; kind: QuotaKind; perMinute: number }[], nowMs: number): void {
    const next = new Map<string, Held>();
    for (const l of limits) {
      const key = quotaKey(l.tenant, l.kind);
      const old = this.held.get(key);
      if (old && old.perMinute === l.perMinute) next.set(key, old);
      else next.set(key, { key, perMinute: l.perMinute, spent: 0, unleased: 0, unleasedAcked: 0, needMax: 0, ledger: "", granted: 0, base: 0, leaderLevel: 0, validUntilMs: -Infinity, fallback: new RefillBucket(this.localShare(l.perMinute), nowMs) });
    }
    this.held = next;
  }

  private localShare(perMinute: number): number {
    return Math.max(1, perMinute / Math.max(1, this.nodes()));
  }

  /** Units asked for per lease: half a limit split over the nodes (docs/tenants.md), at least one need. */
  private want(h: Held): number {
    return Math.min(h.perMinute, Math.max(1, Math.ceil(h.perMinute / (2 * Math.max(1, this.nodes()))), h.needMax));
  }

  private leased(h: Held, nowMs: number): boolean {
    return h.ledger !== "" && h.ledger === this.ledger && nowMs < h.validUntilMs;
  }

  private holding(h: Held): number {
    return h.granted - (h.spent - h.base);
  }

  /** The ask for every key, as of now (one in flight at a time: the sync loop's job). */
  ask(): QuotaAsk {
    return {
      node: this.node,
      boot: this.boot,
      keys: [...this.held.values()].map((h) => ({ key: h.key, per_minute: h.perMinute, want: this.want(h), spent: h.spent, unleased: h.unleased, unleased_acked: h.unleasedAcked })),
    };
  }

  /** The leader's reply to an ask sent at `sentAtMs`. */
  onReply(reply: QuotaReply, sentAtMs: number): void {
    this.ledger = reply.ledger;
    for (const r of reply.keys) {
      const h = this.held.get(r.key);
      if (!h) continue;
      h.ledger = reply.ledger;
      h.granted = r.granted;
      h.base = r.base;
      h.leaderLevel = r.level;
      h.unleasedAcked = Math.max(h.unleasedAcked, r.unleased);
      h.validUntilMs = sentAtMs + QUOTA_LEASE_MS;
      h.needMax = 0;
      // The fallback share is set while connected: a partitioned node, which soon sees the others
      // as dead, keeps dividing by the cluster it last knew instead of claiming the whole limit.
      h.fallback.perMinute = this.localShare(h.perMinute);
      h.fallback.level = Math.min(h.fallback.level, h.fallback.perMinute);
    }
  }

  /** The budget of one key for the frontend's admission (src/frontend/tenants.ts `Budget`). */
  budget(tenant: string, kind: QuotaKind): QuotaBudget | null {
    const h = this.held.get(quotaKey(tenant, kind));
    if (!h) return null;
    return {
      canTake: (nowMs, n) => {
        if (!this.leased(h, nowMs)) return h.fallback.at(nowMs) >= n;
        if (this.holding(h) >= n) return true;
        h.needMax = Math.max(h.needMax, n);
        this.low();
        return this.holding(h) >= n; // the low() hook may have topped up at once (this node leads)
      },
      take: (nowMs, n) => {
        if (this.leased(h, nowMs)) {
          h.spent += n;
          if (this.holding(h) < this.want(h) / 4) this.low();
        } else {
          h.fallback.at(nowMs);
          h.fallback.level -= n;
          h.unleased += n;
        }
      },
      remaining: (nowMs) => Math.max(0, Math.floor(this.leased(h, nowMs) ? this.holding(h) + h.leaderLevel : h.fallback.at(nowMs))),
      waitMs: (nowMs, n) => {
        if (!this.leased(h, nowMs)) {
          const lv = h.fallback.at(nowMs);
          return lv >= n ? 0 : Math.ceil(((n - lv) * 60_000) / h.fallback.perMinute);
        }
        const lv = this.holding(h) + h.leaderLevel;
        return lv >= n ? 1000 : Math.ceil(((n - lv) * 60_000) / h.perMinute);
      },
      resetMs: (nowMs) => {
        const left = this.leased(h, nowMs) ? this.holding(h) + h.leaderLevel : h.fallback.at(nowMs);
        const cap = this.leased(h, nowMs) ? h.perMinute : h.fallback.perMinute;
        return Math.max(0, Math.ceil(((cap - left) * 60_000) / cap));
      },
      mode: (nowMs) => (this.leased(h, nowMs) ? "leased" : "local"),
    };
  }
}

/** One key's budget as the frontend sees it (structurally src/frontend/tenants.ts `Budget`). */
export interface QuotaBudget {
  canTake(nowMs: number, n: number): boolean;
  take(nowMs: number, n: number): void;
  remaining(nowMs: number): number;
  waitMs(nowMs: number, n: number): number;
  resetMs(nowMs: number): number;
  mode(nowMs: number): "leased" | "local";
}

/** An ask from a peer, checked field by field (a malformed one is refused, never half-applied). */
export function parseQuotaAsk(body: unknown): QuotaAsk | null {
  const b = body as Partial<QuotaAsk> | null;
  if (!b || typeof b.node !== "string" || typeof b.boot !== "string" || !Array.isArray(b.keys) || b.keys.length > QUOTA_KEYS_MAX) return null;
  const num = (v: unknown) => typeof v === "number" && Number.isFinite(v) && v >= 0 && v <= 2 ** 50;
  const keys: QuotaAskKey[] = [];
  for (const k of b.keys as Partial<QuotaAskKey>[]) {
    if (!k || typeof k.key !== "string" || k.key.length > 256) return null;
    if (![k.per_minute, k.want, k.spent, k.unleased, k.unleased_acked].every(num)) return null;
    keys.push({ key: k.key, per_minute: k.per_minute!, want: k.want!, spent: k.spent!, unleased: k.unleased!, unleased_acked: k.unleased_acked! });
  }
  return { node: b.node.slice(0, 256), boot: b.boot.slice(0, 64), keys };
}
