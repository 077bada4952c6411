// The cluster-wide quota core (src/cluster/quota.ts) on a virtual clock: a leader's ledger, nodes'
// leases, the partition fallback and the wire counters that make a lost reply harmless.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { QUOTA_LEASE_MS, QuotaLedger, QuotaLeases, parseQuotaAsk, quotaKey } from "../../src/cluster/quota.ts";
import { QuotaSync } from "../../src/cluster/quota-sync.ts";
import type { PeerClient } from "../../src/cluster/peers.ts";
import { createLogger } from "../../src/core/log.ts";
import { Tenants, type SharedBudgets } from "../../src/frontend/tenants.ts";

const KEY = quotaKey("team", "requests");

function cluster(n: number, perMinute: number, clock: VirtualClock) {
  const ledger = new QuotaLedger("leader/1/x");
  const nodes = Array.from({ length: n }, (_, i) => new QuotaLeases(`n${i}`, "b", () => n));
  const sync = (l: QuotaLeases) => l.onReply(ledger.handle(l.ask(), clock.now()), clock.now());
  for (const l of nodes) l.configure([{ tenant: "team", kind: "requests", perMinute }], clock.now());
  return { ledger, nodes, sync };
}

/** Spend one unit at node l if its budget allows; true when admitted. */
function spend(l: QuotaLeases, clock: VirtualClock, n = 1): boolean {
  const b = l.budget("team", "requests")!;
  if (!b.canTake(clock.now(), n)) return false;
  b.take(clock.now(), n);
  return true;
}

describe("cluster quota core", () => {
  test("two nodes spending alternately admit the limit in total, not twice it", () => {
    const clock = new VirtualClock(0);
    const { nodes, sync } = cluster(2, 60, clock);
    nodes.forEach(sync);
    let admitted = 0;
    // 400 requests over 2 s (every 5 ms, alternating), each node syncing every 250 ms.
    for (let i = 0; i < 400; i++) {
      clock.advance(5);
      if (clock.now() % 250 === 0) nodes.forEach(sync);
      if (spend(nodes[i % 2]!, clock)) admitted++;
    }
    // Bucket of 60 + 2 s of refill at 1/s = 62 at most; the leases keep ≤ 2 × 15 undrawn at worst.
    expect(admitted).toBeLessThanOrEqual(62);
    expect(admitted).toBeGreaterThanOrEqual(60 - 2 * 15);
    expect(admitted).toBeGreaterThanOrEqual(55); // both nodes keep asking: little is stranded
  });

  test("without the cluster the same traffic through two local buckets would admit twice the limit", () => {
    const clock = new VirtualClock(0);
    const none: SharedBudgets | undefined = undefined;
    const a = new Tenants([{ key: "k", key_file: "", name: "team", rpm: 60, tpm: 0, concurrency: 0, priority: 0 }], clock, undefined, none);
    const b = new Tenants([{ key: "k", key_file: "", name: "team", rpm: 60, tpm: 0, concurrency: 0, priority: 0 }], clock, undefined, none);
    let admitted = 0;
    for (let i = 0; i < 400; i++) {
      try {
        (i % 2 ? a : b).admit("Bearer k", 1).release();
        admitted++;
      } catch {}
    }
    expect(admitted).toBe(120); // the bug the leases fix
  });

  test("a leader answering its own asks admits exactly as one bucket", () => {
    const clock = new VirtualClock(0);
    const ledger = new QuotaLedger("me/1/x");
    const leases: QuotaLeases = new QuotaLeases("me", "b", () => 1, () => leases.onReply(ledger.handle(leases.ask(), clock.now()), clock.now()));
    const t = new Tenants([{ key: "k", key_file: "", name: "team", rpm: 10, tpm: 0, concurrency: 0, priority: 0 }], clock, undefined, leases);
    let ok = 0;
    for (let i = 0; i < 30; i++) {
      try {
        t.admit("Bearer k", 1).release();
        ok++;
      } catch (e) {
        expect((e as { error: { status: number; headers: Record<string, string> } }).error.headers["x-ratelimit-limit-requests"]).toBe("10");
      }
    }
    expect(ok).toBe(10);
    clock.advance(6000); // one refill unit per 6 s at rpm 10
    expect(() => t.admit("Bearer k", 1)).not.toThrow();
  });

  test("a lost reply is counted once: cumulative counters, the next ask corrects it", () => {
    const clock = new VirtualClock(0);
    const { ledger, nodes } = cluster(2, 40, clock);
    const a = nodes[0]!;
    ledger.handle(a.ask(), clock.now()); // reply lost: a holds nothing, the ledger granted 10
    expect(ledger.level(KEY, clock.now())).toBe(30);
    a.onReply(ledger.handle(a.ask(), clock.now()), clock.now()); // same want: no second grant
    expect(ledger.level(KEY, clock.now())).toBe(30);
    for (let i = 0; i < 10; i++) expect(spend(a, clock)).toBe(true);
    expect(spend(a, clock)).toBe(false); // its 10 are spent; the refusal asks for more (hook)
    a.onReply(ledger.handle(a.ask(), clock.now()), clock.now());
    expect(ledger.level(KEY, clock.now())).toBe(20);
    expect(spend(a, clock)).toBe(true);
  });

  test("a partitioned node falls back to limit / nodes, never zero, and is debited when it comes back", () => {
    const clock = new VirtualClock(0);
    const { ledger, nodes, sync } = cluster(2, 60, clock);
    const b = nodes[1]!;
    nodes.forEach(sync);
    expect(b.budget("team", "requests")!.mode(clock.now())).toBe("leased");
    clock.advance(QUOTA_LEASE_MS); // b hears nothing from the leader for a lease period
    expect(b.budget("team", "requests")!.mode(clock.now())).toBe("local");
    let local = 0;
    while (spend(b, clock)) local++;
    expect(local).toBe(30); // 60 / 2 nodes: a share, not the whole limit and not nothing
    clock.advance(2000); // refills its local share at 30 / min: one unit per 2 s
    expect(spend(b, clock)).toBe(true);
    const before = ledger.level(KEY, clock.now());
    sync(b); // the partition heals: the 31 units b spent on its own are charged to the bucket
    expect(ledger.level(KEY, clock.now())).toBeLessThanOrEqual(before - 31);
    sync(b); // and only once
    expect(ledger.level(KEY, clock.now())).toBeGreaterThan(before - 31 - 15 - 1);
  });

  test("the local share divides by the cluster last seen while connected, not by who looks alive later", () => {
    const clock = new VirtualClock(0);
    const ledger = new QuotaLedger("l/1/x");
    let live = 2;
    const b = new QuotaLeases("b", "b", () => live);
    b.configure([{ tenant: "team", kind: "requests", perMinute: 60 }], 0);
    b.onReply(ledger.handle(b.ask(), 0), 0);
    clock.advance(QUOTA_LEASE_MS);
    live = 1; // cut off, b soon sees the leader as dead
    let local = 0;
    while (spend(b, clock)) local++;
    expect(local).toBe(30);
  });

  test("a new ledger (leader change) voids the old lease at its first reply", () => {
    const clock = new VirtualClock(0);
    const { nodes, sync } = cluster(2, 40, clock);
    const a = nodes[0]!;
    sync(a);
    const fresh = new QuotaLedger("other/2/y");
    a.onReply(fresh.handle(a.ask(), clock.now()), clock.now());
    expect(fresh.level(KEY, clock.now())).toBe(30);
    let n = 0;
    while (spend(a, clock)) n++;
    expect(n).toBe(10); // only the new grant, not old + new
  });

  test("a tokens request larger than a share still passes (the ask grows to its need)", () => {
    const clock = new VirtualClock(0);
    const ledger = new QuotaLedger("l/1/x");
    const key = quotaKey("team", "tokens");
    const a = new QuotaLeases("a", "b", () => 2);
    a.configure([{ tenant: "team", kind: "tokens", perMinute: 1000 }], 0);
    a.onReply(ledger.handle(a.ask(), 0), 0);
    const bud = a.budget("team", "tokens")!;
    expect(bud.canTake(0, 600)).toBe(false); // holds 250
    a.onReply(ledger.handle(a.ask(), 0), 0);
    expect(bud.canTake(0, 600)).toBe(true);
  });

  test("malformed asks are refused whole", () => {
    expect(parseQuotaAsk(null)).toBeNull();
    expect(parseQuotaAsk({ node: "a", boot: "b", keys: [{ key: "k", per_minute: -1, want: 1, spent: 0, unleased: 0, unleased_acked: 0 }] })).toBeNull();
    expect(parseQuotaAsk({ node: "a", boot: "b", keys: [{ key: "k", per_minute: 1, want: "x", spent: 0, unleased: 0, unleased_acked: 0 }] })).toBeNull();
    expect(parseQuotaAsk({ node: "a", boot: "b", keys: [{ key: "k", per_minute: 1, want: 1, spent: 0, unleased: 0, unleased_acked: 0 }] })?.keys.length).toBe(1);
  });
});

describe("quota sync (the asks over a fake peer API, virtual clock)", () => {
  const log = createLogger("test", { sink: { write: () => {} } });
  function pair(clock: VirtualClock) {
    const cut = { on: false };
    let leaderSync: QuotaSync;
    const client: PeerClient = {
      post: async <T>(_address: string, path: string, body: unknown): Promise<T> => {
        if (cut.on) throw new Error("partitioned");
        expect(path).toBe("quota");
        return leaderSync.answer(JSON.parse(JSON.stringify(body))) as T;
      },
    };
    const opts = (self: string, leads: boolean) => ({
      self, boot: "x", clock, log, nodes: () => 2, client: () => client,
      leadership: () => ({ leader: "a", term: 3, self: leads }),
      addressOf: (n: string) => (n === "a" ? "a:1" : null),
    });
    leaderSync = new QuotaSync(opts("a", true));
    const follower = new QuotaSync(opts("b", false));
    for (const s of [leaderSync, follower]) s.leases.configure([{ tenant: "team", kind: "requests", perMinute: 60 }], 0);
    return { leader: leaderSync, follower, cut };
  }
  const flush = () => new Promise<void>((ok) => setImmediate(ok));

  test("the follower's lease comes from the leader; cut off, it falls back to its share; healed, it is debited", async () => {
    const clock = new VirtualClock(0);
    const { leader, follower, cut } = pair(clock);
    leader.start();
    follower.start();
    await flush();
    expect(follower.leases.budget("team", "requests")!.mode(clock.now())).toBe("leased");
    expect(leader.answer({ nonsense: true })).toBe("bad");
    let admitted = 0;
    for (let i = 0; i < 200; i++) {
      clock.advance(10);
      await flush();
      for (const s of [leader, follower]) if (spend(s.leases, clock)) admitted++;
    }
    expect(admitted).toBeLessThanOrEqual(60 + 2); // one bucket of 60, 2 s of refill
    expect(admitted).toBeGreaterThanOrEqual(55);
    cut.on = true;
    for (let t = 0; t <= QUOTA_LEASE_MS; t += 250) {
      clock.advance(250);
      await flush();
    }
    expect(follower.leases.budget("team", "requests")!.mode(clock.now())).toBe("local");
    let local = 0;
    while (spend(follower.leases, clock)) local++;
    expect(local).toBeGreaterThan(0);
    expect(local).toBeLessThanOrEqual(30);
    expect(follower.stats.failed).toBeGreaterThan(0);
    cut.on = false;
    clock.advance(250);
    await flush();
    expect(follower.leases.budget("team", "requests")!.mode(clock.now())).toBe("leased");
    // what the follower spent alone came out of the shared bucket: the leader's own lease is all there is
    let more = 0;
    while (spend(leader.leases, clock)) more++;
    expect(more).toBeLessThanOrEqual(2);
    leader.stop();
    follower.stop();
  });

  test("a node that does not lead answers a peer's ask with null (409 on the wire)", () => {
    const clock = new VirtualClock(0);
    const { follower } = pair(clock);
    expect(follower.answer({ node: "c", boot: "y", keys: [] })).toBeNull();
  });
});
