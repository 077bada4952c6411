// Votes survive restarts: a voter that granted its vote in term T refuses another candidate in T
// after a restart (state in node.data_dir), terms never go backwards, and PreVote changes nothing.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { PeersBackend, votersHash } from "../../src/cluster/peers.ts";
import { StateStore } from "../../src/cluster/state.ts";
import { removeDir, tempDir } from "./harness/cluster.ts";

const SEEDS = ["127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3"];
const never = { post: () => new Promise<never>(() => {}) };

async function voter(dir: string) {
  const b = new PeersBackend({ seeds: SEEDS, store: new StateStore(dir), client: never, clock: new VirtualClock(0), rng: new SeededRng(1), log: memoryLogger() });
  await b.start({ name: "v", address: SEEDS[0]!, meta: {} });
  return b;
}
const req = (candidate: string, address: string, term: number, pre = false) => ({ pre, term, candidate, address, voters: votersHash(SEEDS) });

describe("persisted votes", () => {
  test("one vote per term across a restart; terms never decrease", async () => {
    const dir = tempDir("votes");
    const a = await voter(dir);
    expect(a.onVote(req("b", SEEDS[1]!, 5, true))).toMatchObject({ granted: true, term: 0 }); // PreVote: no state change
    expect(new StateStore(dir).get().term).toBe(0);
    expect(a.onVote(req("b", SEEDS[1]!, 5))).toMatchObject({ granted: true, term: 5 });
    expect(new StateStore(dir).get()).toMatchObject({ term: 5, votedFor: "b" }); // on disk before the reply
    const restarted = await voter(dir); // same data dir: a restart
    expect(restarted.onVote(req("c", SEEDS[2]!, 5))).toMatchObject({ granted: false, term: 5 });
    expect(restarted.onVote(req("b", SEEDS[1]!, 5))).toMatchObject({ granted: true }); // same candidate again is fine
    expect(restarted.onVote(req("c", SEEDS[2]!, 4))).toMatchObject({ granted: false, term: 5 });
    expect(restarted.onVote(req("c", SEEDS[2]!, 6))).toMatchObject({ granted: true, term: 6 });
    expect(new StateStore(dir).get().incarnation).toBe(2);
    void a.close(); // the farewell gossip never completes with this client; close() stops the timers first
    void restarted.close();
    removeDir(dir);
  });

  test("a candidate outside the voter list or with a different list gets no vote", async () => {
    const dir = tempDir("votes2");
    const a = await voter(dir);
    expect(a.onVote(req("x", "127.0.0.1:9", 1))).toMatchObject({ granted: false });
    expect(a.onVote({ ...req("b", SEEDS[1]!, 1), voters: "other" })).toMatchObject({ granted: false });
    expect(a.onVote({ term: "1" } as never)).toMatchObject({ granted: false }); // malformed
    expect(new StateStore(dir).get().votedFor).toBeNull();
    void a.close();
    removeDir(dir);
  });
});
