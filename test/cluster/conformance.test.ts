// The DiscoveryBackend conformance suite, run over every backend with REAL processes: three nodes on
// loopback (test/cluster/harness/node.ts), each its own port, data dir and ClusterService.
// Bounds are the issue's: a dead node leaves within 5 s (file, peers) or the lease TTL (etcd, plus
// etcd's own expiry granularity); the measured figures are printed for the closing note.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { peer } from "../helpers/peers.ts";
import { EtcdServer, TestNode, agreedLeader, freePort, leadersByTerm, membersAre, now, removeDir, tempDir, waitFor, type NodeSpec } from "./harness/cluster.ts";

interface BackendCase {
  kind: "file" | "peers" | "etcd";
  /** A killed node must be gone from every view within this (ms after SIGKILL). */
  removalMs: number;
  /** Killing the leader elects a new one within this (ms after SIGKILL). */
  failoverMs: number;
  available: () => boolean;
}

const ETCD_TTL_S = 3;
const hasEtcd = () => peer("etcd", ["etcd", "--version"]);

const CASES: BackendCase[] = [
  { kind: "file", removalMs: 5000, failoverMs: 6000, available: () => true },
  { kind: "peers", removalMs: 5000, failoverMs: 6000, available: () => true },
  // etcd expires leases on its own schedule (checked every 500 ms): TTL + 2 s slack
  { kind: "etcd", removalMs: ETCD_TTL_S * 1000 + 2000, failoverMs: ETCD_TTL_S * 1000 + 3000, available: hasEtcd },
];

describe.each(CASES)("DiscoveryBackend conformance: $kind", (c) => {
  const run = c.available();
  const root = tempDir(`conf-${c.kind}`);
  const history = join(root, "history.jsonl");
  const nodes: TestNode[] = [];
  const etcd = new EtcdServer();

  beforeAll(async () => {
    if (!run) return;
    if (c.kind === "etcd") await etcd.start();
    const ports = [await freePort(), await freePort(), await freePort()];
    const seeds = ports.map((p) => `127.0.0.1:${p}`);
    ports.forEach((port, i) => {
      const spec: NodeSpec = {
        name: `n${i}`,
        port,
        dataDir: join(root, `n${i}`),
        discovery: c.kind,
        token: "conformance-token",
        history,
        seed: 100 + i,
        fileDir: join(root, "shared"),
        seeds,
        etcd: c.kind === "etcd" ? [etcd.url] : [],
        prefix: "/herd-conf",
        leaseTtlS: ETCD_TTL_S,
      };
      nodes.push(new TestNode(spec));
    });
    await Promise.all(nodes.map((n) => n.start()));
  }, 60_000);

  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.stop()));
    await etcd.destroy();
    removeDir(root);
  });

  test.skipIf(!run)("all nodes see every member and agree on one leader", async () => {
    await waitFor("three members everywhere", 15_000, () => membersAre(nodes, ["n0", "n1", "n2"]));
    const l = await waitFor("one agreed leader", 15_000, () => agreedLeader(nodes));
    expect(["n0", "n1", "n2"]).toContain(l.leader);
    expect(l.term).toBeGreaterThan(0);
  }, 40_000);

  test.skipIf(!run)("killing the leader elects a new one within the bound, and removes it within the bound", async () => {
    const before = await waitFor("one agreed leader", 15_000, () => agreedLeader(nodes));
    const victim = nodes.find((n) => n.spec.name === before.leader)!;
    const rest = nodes.filter((n) => n !== victim);
    const killedAt = await victim.killAndWait();
    const after = await waitFor("a new leader", c.failoverMs + 5000, async () => {
      const l = await agreedLeader(rest);
      return l && l.leader !== before.leader ? l : undefined;
    });
    const failoverMs = now() - killedAt;
    await waitFor("the dead leader leaves every view", c.removalMs + 5000, () => membersAre(rest, rest.map((n) => n.spec.name)));
    const removalMs = now() - killedAt;
    console.log(`[${c.kind}] leader failover ${failoverMs.toFixed(0)} ms, dead-leader removal ${removalMs.toFixed(0)} ms`);
    expect(after.term).toBeGreaterThan(before.term);
    expect(failoverMs).toBeLessThanOrEqual(c.failoverMs);
    expect(removalMs).toBeLessThanOrEqual(c.removalMs);
  }, 60_000);

  test.skipIf(!run)("a restarted node rejoins without deposing the leader", async () => {
    const down = nodes.find((n) => n.proc === null)!;
    const before = await waitFor("one agreed leader", 15_000, () => agreedLeader(nodes.filter((n) => n !== down)));
    await down.start();
    await waitFor("three members everywhere", 15_000, () => membersAre(nodes, ["n0", "n1", "n2"]));
    const l = await waitFor("all three agree", 15_000, () => agreedLeader(nodes));
    expect(l).toEqual(before);
  }, 60_000);

  test.skipIf(!run)("a dead follower leaves every view within the bound", async () => {
    const l = await waitFor("one agreed leader", 15_000, () => agreedLeader(nodes));
    const victim = nodes.find((n) => n.spec.name !== l.leader)!;
    const rest = nodes.filter((n) => n !== victim);
    const killedAt = await victim.killAndWait();
    await waitFor("the dead follower leaves every view", c.removalMs + 5000, () => membersAre(rest, rest.map((n) => n.spec.name)));
    const removalMs = now() - killedAt;
    console.log(`[${c.kind}] follower removal ${removalMs.toFixed(0)} ms`);
    expect(removalMs).toBeLessThanOrEqual(c.removalMs);
    expect(await agreedLeader(rest)).toEqual(l); // losing a follower changes no leadership
    await victim.start();
    await waitFor("rejoined", 15_000, () => membersAre(nodes, ["n0", "n1", "n2"]));
  }, 60_000);

  test.skipIf(!run)("a leader paused (SIGSTOP) past the bound is replaced; resumed, it does not lead", async () => {
    const l = await waitFor("one agreed leader", 15_000, () => agreedLeader(nodes));
    const paused = nodes.find((n) => n.spec.name === l.leader)!;
    const rest = nodes.filter((n) => n !== paused);
    paused.kill("SIGSTOP");
    try {
      await waitFor("a new leader", c.failoverMs + 5000, async () => {
        const a = await agreedLeader(rest);
        return a && a.leader !== l.leader ? a : undefined;
      });
    } finally {
      paused.kill("SIGCONT");
    }
    const after = await waitFor("all three agree again", 15_000, () => agreedLeader(nodes));
    expect(after.leader).not.toBe(l.leader);
    expect(after.term).toBeGreaterThan(l.term);
    await waitFor("three members everywhere", 15_000, () => membersAre(nodes, ["n0", "n1", "n2"]));
  }, 60_000);

  test.skipIf(!run)("metadata (where worker adverts ride) reaches every node", async () => {
    const live = nodes.filter((x) => x.proc !== null);
    const src = live[0]!;
    await fetch(`http://${src.address}/test/meta`, { method: "POST", body: JSON.stringify({ advert: "v2", pid: 1 }) });
    await waitFor("the new metadata everywhere", 10_000, async () => {
      const views = await Promise.all(live.map((n) => n.status()));
      return views.every((v) => v?.nodes.find((m) => m.name === src.spec.name)?.meta.advert === "v2") ? true : undefined;
    });
  }, 20_000);

  test.skipIf(!run)("the peer API answers 401 without the cluster token", async () => {
    const n = nodes.find((x) => x.proc !== null)!;
    const bad = await fetch(`http://${n.address}/cluster/v1/view`);
    expect(bad.status).toBe(401);
    const good = await fetch(`http://${n.address}/cluster/v1/view`, { headers: { authorization: "Bearer conformance-token" } });
    expect(good.status).toBe(200);
    expect(((await good.json()) as { discovery: string }).discovery).toBe(c.kind);
  });

  test.skipIf(!run)("history: at most one leader per term", () => {
    const byTerm = leadersByTerm(history);
    expect(byTerm.size).toBeGreaterThan(0);
    for (const [term, names] of byTerm) expect({ term, leaders: [...names] }).toEqual({ term, leaders: [...names].slice(0, 1) });
  });
});
