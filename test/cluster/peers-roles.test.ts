// peers backend, real processes: a fourth host joins through one seed as a non-voter (learns every
// member by gossip, follows the leader, never leads), and a leader paused with SIGSTOP for longer
// than the election timeout is replaced and, when resumed, steps down instead of acting in its term.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { TestNode, agreedLeader, freePort, leadersByTerm, membersAre, removeDir, sleep, tempDir, waitFor } from "./harness/cluster.ts";

describe("peers: non-voters and a paused leader", () => {
  const root = tempDir("roles");
  const history = join(root, "history.jsonl");
  const nodes: TestNode[] = [];
  const names = ["v0", "v1", "v2", "x3"];

  beforeAll(async () => {
    const ports = [await freePort(), await freePort(), await freePort(), await freePort()];
    const voters = ports.slice(0, 3).map((p) => `127.0.0.1:${p}`);
    for (let i = 0; i < 4; i++)
      nodes.push(new TestNode({ name: names[i]!, port: ports[i]!, dataDir: join(root, names[i]!), discovery: "peers", token: "r", history, seed: 40 + i, seeds: i === 3 ? [voters[1]!, ...voters.filter((_, j) => j !== 1)] : voters }));
    await Promise.all(nodes.map((n) => n.start()));
  }, 60_000);

  afterAll(async () => {
    for (const n of nodes) n.kill("SIGCONT");
    await Promise.all(nodes.map((n) => n.stop()));
    removeDir(root);
  });

  test("the non-voter sees everyone, follows the leader and never leads", async () => {
    await waitFor("four members everywhere", 15_000, () => membersAre(nodes, names));
    const l = await waitFor("agreement of all four", 15_000, () => agreedLeader(nodes));
    expect(l.leader).not.toBe("x3");
  }, 40_000);

  test("a leader paused past the election timeout is replaced; resumed, it steps down", async () => {
    const l = await waitFor("agreement", 15_000, () => agreedLeader(nodes));
    const old = nodes.find((n) => n.spec.name === l.leader)!;
    const rest = nodes.filter((n) => n !== old);
    old.kill("SIGSTOP");
    const next = await waitFor("a new leader", 15_000, async () => {
      const a = await agreedLeader(rest);
      return a && a.leader !== l.leader ? a : undefined;
    });
    await sleep(1000);
    old.kill("SIGCONT");
    const healed = await waitFor("all four agree again", 15_000, () => agreedLeader(nodes));
    expect(healed).toEqual(next);
    expect(healed.term).toBeGreaterThan(l.term);
  }, 60_000);

  test("history: at most one leader per term, never the non-voter", () => {
    const byTerm = leadersByTerm(history);
    for (const [term, ns] of byTerm) expect({ term, n: ns.size, x3: ns.has("x3") }).toEqual({ term, n: 1, x3: false });
  });
});
