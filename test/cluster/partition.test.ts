// Partition harness for the peers backend: three real node processes whose every directed link runs
// through a LinkProxy (drop, delay, cut). History check: at most one leader per term; the minority
// side (an isolated leader) stops leading and elects nobody; healing and a one-way cut do not
// depose the majority's leader (PreVote + leader stickiness keep the term unchanged).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { TestNode, agreedLeader, freePort, leadersByTerm, now, removeDir, sleep, tempDir, waitFor } from "./harness/cluster.ts";
import { LinkProxy, type LinkMode } from "./harness/proxy.ts";

describe("peers under partitions (TCP proxy on every link)", () => {
  const root = tempDir("partition");
  const history = join(root, "history.jsonl");
  const nodes: TestNode[] = [];
  const links = new Map<string, LinkProxy>(); // "n0->n1"

  const setLinks = (pred: (from: string, to: string) => boolean, mode: LinkMode, delayMs = 0) => {
    for (const [k, p] of links) {
      const [from, to] = k.split("->") as [string, string];
      if (pred(from, to)) p.set(mode, delayMs);
    }
  };
  const byName = (n: string) => nodes.find((x) => x.spec.name === n)!;
  const historyLines = () => [...leadersByTerm(history).entries()];

  beforeAll(async () => {
    const ports = [await freePort(), await freePort(), await freePort()];
    const names = ["n0", "n1", "n2"];
    for (let i = 0; i < 3; i++)
      for (let j = 0; j < 3; j++) {
        if (i === j) continue;
        const p = new LinkProxy(ports[j]!);
        await p.start();
        links.set(`${names[i]}->${names[j]}`, p);
      }
    const seeds = ports.map((p) => `127.0.0.1:${p}`);
    for (let i = 0; i < 3; i++) {
      const dial: Record<string, string> = {};
      for (let j = 0; j < 3; j++) if (i !== j) dial[seeds[j]!] = `127.0.0.1:${links.get(`${names[i]}->${names[j]}`)!.port}`;
      nodes.push(new TestNode({ name: names[i]!, port: ports[i]!, dataDir: join(root, names[i]!), discovery: "peers", token: "p-token", history, seed: 7 + i, seeds, dial }));
    }
    await Promise.all(nodes.map((n) => n.start()));
  }, 60_000);

  afterAll(async () => {
    await Promise.all(nodes.map((n) => n.stop()));
    for (const p of links.values()) p.stop();
    removeDir(root);
  });

  test("an isolated leader steps down, the majority elects, the minority elects nobody, healing keeps the new leader", async () => {
    const first = await waitFor("one agreed leader", 20_000, () => agreedLeader(nodes));
    const old = byName(first.leader);
    const rest = nodes.filter((n) => n !== old);
    const cutAt = now();
    setLinks((a, b) => a === old.spec.name || b === old.spec.name, "drop");
    const second = await waitFor("majority leader", 10_000, async () => {
      const l = await agreedLeader(rest);
      return l && l.leader !== first.leader ? l : undefined;
    });
    await waitFor("isolated leader steps down", 5_000, async () => ((await old.status())?.is_leader === false ? true : undefined));
    console.log(`[partition] majority re-elected after ${(now() - cutAt).toFixed(0)} ms`);
    expect(second.term).toBeGreaterThan(first.term);
    // hold the partition: the minority side never leads and knows no leader
    const before = historyLines().filter(([, names]) => names.has(old.spec.name)).length;
    for (let i = 0; i < 20; i++) {
      const v = await old.status();
      expect(v?.is_leader).toBe(false);
      await sleep(200);
    }
    expect((await old.status())?.leader).toBeNull();
    expect(historyLines().filter(([, names]) => names.has(old.spec.name)).length).toBe(before);
    setLinks(() => true, "up");
    const healed = await waitFor("all three agree after healing", 10_000, () => agreedLeader(nodes));
    expect(healed).toEqual(second); // PreVote: the returning node did not raise the term
  }, 60_000);

  test("a one-way cut from the leader to one follower does not change the term", async () => {
    const l = await waitFor("one agreed leader", 10_000, () => agreedLeader(nodes));
    const follower = nodes.find((n) => n.spec.name !== l.leader)!;
    setLinks((a, b) => a === l.leader && b === follower.spec.name, "cut");
    for (let i = 0; i < 25; i++) {
      const views = await Promise.all(nodes.map((n) => n.status()));
      for (const v of views) expect(v!.term).toBe(l.term);
      await sleep(200);
    }
    setLinks(() => true, "up");
    expect(await waitFor("agreement", 10_000, () => agreedLeader(nodes))).toEqual(l);
  }, 60_000);

  test("100 ms delay on every link keeps one stable leader", async () => {
    const l = await waitFor("one agreed leader", 10_000, () => agreedLeader(nodes));
    setLinks(() => true, "delay", 100);
    for (let i = 0; i < 20; i++) {
      const views = await Promise.all(nodes.map((n) => n.status()));
      expect(views.filter((v) => v!.is_leader).map((v) => v!.node)).toEqual([l.leader]);
      await sleep(200);
    }
    setLinks(() => true, "up");
  }, 60_000);

  test("history: at most one leader per term", () => {
    const byTerm = leadersByTerm(history);
    expect(byTerm.size).toBeGreaterThan(1);
    for (const [term, names] of byTerm) expect({ term, n: names.size }).toEqual({ term, n: 1 });
  });
});
