// `etcd` discovery: membership and election in a real etcd over its JSON gateway (etcd-client.ts).
//   <prefix>/nodes/<name>        this node's record, attached to its lease (gone when the lease is)
//   <prefix>/election/<lease hex> candidate keys of etcd's election API; the oldest is the leader
// One watch over <prefix>/ keeps the view (members and the leader key); it resyncs with a range
// after any break. The term is the leader key's create revision: it increases with every new
// leadership, and a duty is fenced by `stillCreatedAt(leaderKey, term)` (a txn compare on CREATE).
// While etcd is unreachable the last view stays, and this node reports itself leader only while its
// lease is provably live: the last acknowledged keepalive was SENT less than the TTL ago (the server
// extended the lease at or after that instant, so it cannot have expired before send + TTL).
// The view is stale (stale(); /admin/cluster view_stale, leader null) from the first failed etcd
// call until the next answered one, and whenever no keepalive was answered for a third of the TTL
// plus STALE_GRACE_MS (a black-holed connection fails by the client's 3 s deadline).
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Rng } from "../core/rng.ts";
import { Emitter, sameView, type ClusterEvent, type DiscoveryBackend, type LeaderView, type Member, type NodeMeta, type SelfInfo } from "./backend.ts";
import { EtcdClient, type KeyValue, type LeaderKey } from "./etcd-client.ts";

export interface EtcdBackendOptions {
  endpoints: string[];
  prefix: string;
  lease_ttl_s: number;
  clock: Clock;
  rng: Rng;
  log: Logger;
  fetch?: typeof fetch;
}

/** How often the view and lease liveness are re-evaluated. */
const TICK_MS = 250;
/** Retry delay after an etcd error (plus up to the same again at random, so nodes do not sync up). */
const RETRY_MS = 500;
/** Past the keepalive period, how long without an answered keepalive before the view is stale. */
const STALE_GRACE_MS = 2000;

export class EtcdBackend implements DiscoveryBackend {
  readonly kind = "etcd";
  private readonly client: EtcdClient;
  private readonly events = new Emitter();
  private readonly kvs = new Map<string, KeyValue>();
  private readonly seenAt = new Map<string, number>();
  private self!: SelfInfo;
  private lease: string | null = null;
  private leaseOkSentAt = -Infinity;
  /** The last etcd call failed (network, deadline) and none succeeded since. */
  private unreachable = false;
  private keepaliveDue = 0;
  private keepaliveBusy = false;
  private registering = false;
  private campaigning = false;
  private campaignAbort: AbortController | null = null;
  private held: LeaderKey | null = null;
  private heldKey = "";
  private heldRev = 0;
  private watchAbort = new AbortController();
  private timer: TimerHandle | null = null;
  private view: LeaderView = { leader: null, term: 0, self: false };
  private membersKey = "";
  private watchRev = 0;
  private closed = false;

  constructor(private readonly o: EtcdBackendOptions) {
    this.client = new EtcdClient(o.endpoints, o.fetch);
  }

  private get nodesPrefix() {
    return `${this.o.prefix.replace(/\/+$/, "")}/nodes/`;
  }
  private get electionName() {
    return `${this.o.prefix.replace(/\/+$/, "")}/election`;
  }
  private get ttlMs() {
    return this.o.lease_ttl_s * 1000;
  }

  async start(self: SelfInfo): Promise<void> {
    this.self = self;
    await this.register().catch((e) => this.o.log.warn("etcd registration failed; retrying", { error: String(e) }));
    void this.watchLoop();
    this.tick();
  }

  setMeta(meta: NodeMeta): void {
    this.self = { ...this.self, meta };
    if (this.lease) void this.client.put(this.nodesPrefix + this.self.name, JSON.stringify(this.self), this.lease).catch(() => {});
  }

  members(): Member[] {
    const now = this.o.clock.now();
    const out: Member[] = [];
    for (const kv of this.kvs.values()) {
      if (!kv.key.startsWith(this.nodesPrefix)) continue;
      let rec: SelfInfo;
      try {
        rec = JSON.parse(kv.value);
      } catch {
        continue;
      }
      out.push({ name: rec.name, address: rec.address, meta: rec.meta ?? {}, state: "alive", lastSeenMs: Math.round(now - (this.seenAt.get(kv.key) ?? now)) });
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  watch(fn: (e: ClusterEvent) => void): () => void {
    return this.events.on(fn);
  }

  campaign(): void {
    if (this.campaigning) return;
    this.campaigning = true;
    void this.campaignLoop();
  }

  async resign(): Promise<void> {
    this.campaigning = false;
    this.campaignAbort?.abort(); // etcd resigns a candidate whose campaign request is cancelled
    const held = this.held;
    this.held = null;
    if (held) await this.client.resign(held).catch((e) => this.o.log.warn("etcd resign failed; the lease bounds it", { error: String(e) }));
    this.refresh();
  }

  leader(): LeaderView {
    this.refresh(); // lease liveness is evaluated at call time, not only every tick
    return { ...this.view };
  }

  stale(): boolean {
    return this.unreachable || this.lease === null || this.o.clock.now() > this.leaseOkSentAt + this.ttlMs / 3 + STALE_GRACE_MS;
  }

  /**
   * Fencing for a leader duty that touches etcd: true only if our leader key still exists with the
   * create revision we won (a txn compare on CREATE). Guard writes with the same compare.
   */
  async stillLeader(): Promise<boolean> {
    const held = this.held;
    if (!held || !this.leaseLive()) return false;
    return this.client.stillCreatedAt(this.heldKey, this.heldRev).catch(() => false);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.timer?.cancel();
    await this.resign();
    this.watchAbort.abort();
    if (this.lease) await this.client.revoke(this.lease).catch(() => {}); // deletes our keys at once
  }

  /** Lease is live by our own conservative clock (see the file comment). */
  private leaseLive(): boolean {
    return this.lease !== null && this.o.clock.now() < this.leaseOkSentAt + this.ttlMs;
  }

  // ---- session: lease + node record ----

  private async register(): Promise<void> {
    if (this.registering || this.closed) return;
    this.registering = true;
    try {
      const sentAt = this.o.clock.now();
      const lease = await this.client.grant(this.o.lease_ttl_s);
      await this.client.put(this.nodesPrefix + this.self.name, JSON.stringify(this.self), lease);
      this.lease = lease;
      this.leaseOkSentAt = sentAt;
      this.unreachable = false;
      this.keepaliveDue = sentAt + this.ttlMs / 3;
      this.o.log.info("registered in etcd", { lease });
      if (this.campaigning) void this.campaignLoop();
    } finally {
      this.registering = false;
    }
  }

  private async keepalive(): Promise<void> {
    const lease = this.lease;
    if (!lease || this.keepaliveBusy) return;
    this.keepaliveBusy = true;
    const sentAt = this.o.clock.now();
    try {
      const ttl = await this.client.keepalive(lease);
      if (lease !== this.lease) return;
      this.unreachable = false;
      if (ttl > 0) {
        this.leaseOkSentAt = sentAt;
        this.keepaliveDue = sentAt + this.ttlMs / 3;
      } else this.leaseLost("etcd says the lease expired");
    } catch {
      this.unreachable = true;
      this.refresh();
      this.keepaliveDue = sentAt + RETRY_MS; // unreachable: keep trying the same lease
    } finally {
      this.keepaliveBusy = false;
    }
  }

  private leaseLost(why: string): void {
    this.o.log.warn("etcd lease lost; registering again", { lease: this.lease, why });
    this.lease = null;
    this.held = null;
    this.campaignAbort?.abort();
    this.refresh();
    void this.register().catch(() => {});
  }

  private tick(): void {
    if (this.closed) return;
    const now = this.o.clock.now();
    if (this.lease === null) void this.register().catch(() => {});
    else if (now >= this.keepaliveDue) void this.keepalive();
    this.refresh();
    this.timer = this.o.clock.setTimer(TICK_MS, () => this.tick());
  }

  // ---- election ----

  private campaignRunning = false;

  private async campaignLoop(): Promise<void> {
    if (this.campaignRunning) return;
    this.campaignRunning = true;
    try {
      while (this.campaigning && !this.closed && this.lease !== null && this.held === null) {
        const lease = this.lease;
        this.campaignAbort = new AbortController();
        try {
          const key = await this.client.campaign(this.electionName, lease, this.self.name, this.campaignAbort.signal);
          // A returned LeaderKey is not proof: a candidate whose lease expired while waiting is
          // still answered. Confirm that our key exists with the returned create revision.
          const k = Buffer.from(key.key, "base64").toString("utf8");
          const rev = Number(key.rev);
          if (lease === this.lease && (await this.client.stillCreatedAt(k, rev))) {
            this.held = key;
            this.heldKey = k;
            this.heldRev = rev;
            this.o.log.info("leader", { term: rev });
            this.refresh();
            return;
          }
        } catch (e) {
          if (this.closed || !this.campaigning) return;
          this.o.log.debug("campaign interrupted", { error: String(e) });
        }
        await this.o.clock.sleep(RETRY_MS + this.o.rng.int(RETRY_MS));
      }
    } finally {
      this.campaignRunning = false;
    }
  }

  // ---- view: range + watch, resynced after every break ----

  private async watchLoop(): Promise<void> {
    while (!this.closed) {
      try {
        const { kvs, revision } = await this.client.range(this.o.prefix.replace(/\/+$/, "") + "/");
        this.kvs.clear();
        this.watchRev = revision;
        const now = this.o.clock.now();
        for (const kv of kvs) {
          this.kvs.set(kv.key, kv);
          if (!this.seenAt.has(kv.key)) this.seenAt.set(kv.key, now);
        }
        this.refresh();
        await this.client.watch(
          this.o.prefix.replace(/\/+$/, "") + "/",
          revision + 1,
          (events, rev) => {
            // only an events response proves we have seen everything up to its revision (the
            // `created` response carries the store's current revision before its events arrive)
            if (events.length > 0) this.watchRev = Math.max(this.watchRev, rev);
            const t = this.o.clock.now();
            for (const e of events) {
              if (e.type === "DELETE") {
                this.kvs.delete(e.kv.key);
                this.seenAt.delete(e.kv.key);
              } else {
                this.kvs.set(e.kv.key, e.kv);
                this.seenAt.set(e.kv.key, t);
              }
            }
            this.refresh();
          },
          this.watchAbort.signal,
        );
      } catch (e) {
        if (this.closed) return;
        this.o.log.debug("etcd watch broke; keeping the last view", { error: String(e) });
      }
      if (!this.closed) await this.o.clock.sleep(RETRY_MS + this.o.rng.int(RETRY_MS));
    }
  }

  /** The oldest candidate key is the leader (that is how etcd's election API orders campaigners). */
  private currentLeader(): KeyValue | null {
    let best: KeyValue | null = null;
    const prefix = this.electionName + "/";
    for (const kv of this.kvs.values()) {
      if (!kv.key.startsWith(prefix)) continue;
      if (best === null || kv.createRevision < best.createRevision) best = kv;
    }
    return best;
  }

  private refresh(): void {
    const lk = this.currentLeader();
    if (this.held && this.watchRev >= this.heldRev && !this.kvs.has(this.heldKey)) {
      // our key is gone from etcd (seen through the watch): leadership is over
      this.o.log.warn("leadership lost", { term: this.heldRev });
      this.held = null;
      if (this.campaigning) void this.campaignLoop();
    }
    const self = this.held !== null && this.leaseLive() && (lk === null || lk.key === this.heldKey);
    const v: LeaderView = self
      ? { leader: this.self.name, term: this.heldRev, self: true }
      : lk && !this.stale()
        ? { leader: lk.value, term: lk.createRevision, self: false }
        : { leader: null, term: this.view.term, self: false };
    if (!sameView(v, this.view)) {
      this.view = v;
      this.events.emit({ kind: "leader", view: { ...v } });
    }
    const key = this.members().map((m) => `${m.name}@${m.address}${JSON.stringify(m.meta)}`).join(",");
    if (key !== this.membersKey) {
      this.membersKey = key;
      this.events.emit({ kind: "members", members: this.members() });
    }
  }
}

