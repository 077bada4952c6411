// Deterministic simulation of the peers backend (election + gossip) on a VirtualClock with a fake
// network: per-directed-link cuts and random delays, partitions that change every few seconds, many
// seeds. Invariants checked over the whole history (see src/cluster/election.ts):
//   I1 at most one leader per term;  I2 at most one granted vote per (voter, term);
//   I4 during a stable partition, no node on a minority side becomes leader;
//   liveness: a connected majority has a leader again within a few election timeouts.
import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { VirtualClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { SeededRng, type Rng } from "../../src/core/rng.ts";
import type { PeerClient } from "../../src/cluster/peers.ts";
import { PeersBackend } from "../../src/cluster/peers.ts";
import { StateStore } from "../../src/cluster/state.ts";
import { removeDir, tempDir } from "./harness/cluster.ts";

const flush = () => new Promise<void>((r) => setImmediate(r));

class Net {
  cut = new Set<string>(); // "a->b"
  nodes = new Map<string, PeersBackend>();
  votes: { voter: string; term: number; candidate: string }[] = [];
  constructor(
    readonly clock: VirtualClock,
    readonly rng: Rng,
  ) {}
  up = (a: string, b: string) => !this.cut.has(`${a}->${b}`);
  client(from: string): PeerClient {
    return {
      post: <T>(to: string, path: string, body: unknown, timeoutMs: number) =>
        new Promise<T>((resolve, reject) => {
          const timeout = this.clock.setTimer(timeoutMs, () => reject(new Error("timeout")));
          const delay = 1 + this.rng.int(20);
          this.clock.setTimer(delay, () => {
            const target = this.nodes.get(to);
            if (!target || !this.up(from, to)) return;
            const b = body as any;
            const reply =
              path === "gossip" ? target.onGossip(b) : path === "vote" ? target.onVote(b) : target.onBeat(b);
            if (path === "vote" && !b.pre && (reply as any).granted) this.votes.push({ voter: to, term: b.term, candidate: b.candidate });
            this.clock.setTimer(1 + this.rng.int(20), () => {
              if (!this.up(to, from)) return;
              timeout.cancel();
              resolve(reply as T);
            });
          });
        }),
    };
  }
}

async function simulate(seed: number, voters = 5, phases = 8) {
  const clock = new VirtualClock(0);
  const rng = new SeededRng(seed);
  const net = new Net(clock, rng.fork());
  const root = tempDir(`sim-${seed}`);
  const addrs = Array.from({ length: voters }, (_, i) => `10.0.0.${i + 1}:8000`);
  const leaders: { name: string; term: number; at: number }[] = [];
  const backends = addrs.map((address, i) => {
    const b = new PeersBackend({
      seeds: addrs,
      store: new StateStore(join(root, `n${i}`)),
      client: net.client(address),
      clock,
      rng: rng.fork(),
      log: memoryLogger(),
    });
    net.nodes.set(address, b);
    b.watch((e) => {
      if (e.kind === "leader" && e.view.self) leaders.push({ name: address, term: e.view.term, at: clock.now() });
    });
    return b;
  });
  await Promise.all(backends.map((b, i) => b.start({ name: addrs[i]!, address: addrs[i]!, meta: {} })));
  backends.forEach((b) => b.campaign());
  const runFor = async (ms: number) => {
    const end = clock.now() + ms;
    while (clock.now() < end) {
      clock.advance(5);
      await flush();
    }
  };
  const violations: string[] = [];
  let recovered = 0;
  for (let p = 0; p < phases; p++) {
    // split into a random side and the rest (sometimes no split at all)
    net.cut.clear();
    const side = new Set(addrs.filter(() => rng.float() < 0.4));
    if (p % 3 !== 2) for (const a of addrs) for (const b of addrs) if (side.has(a) !== side.has(b)) net.cut.add(`${a}->${b}`);
    const start = clock.now();
    await runFor(12_000);
    const majority = Math.floor(voters / 2) + 1;
    const minority = net.cut.size === 0 ? new Set<string>() : side.size < majority ? side : addrs.length - side.size < majority ? new Set(addrs.filter((a) => !side.has(a))) : new Set<string>();
    // I4: after 2 election timeouts (old leaders stepped down, stale votes drained), no minority leader
    for (const l of leaders) if (l.at > start + 4000 && minority.has(l.name)) violations.push(`minority leader ${l.name} term ${l.term} in phase ${p}`);
    // liveness: the majority side (or everyone) has a current leader at the end of the phase
    const views = backends.map((b) => b.leader());
    if (views.some((v) => v.self)) recovered++;
  }
  const closing = Promise.all(backends.map((b) => b.close()));
  await runFor(1000); // close() waits for its farewell gossip, which needs the virtual clock to move
  await closing;
  removeDir(root);
  return { leaders, votes: net.votes, violations, recovered, phases };
}

describe("peers election under simulated partitions (VirtualClock, seeded)", () => {
  for (const seed of [1, 2, 3, 4, 5, 6]) {
    test(`seed ${seed}: one leader per term, one vote per voter and term, no minority leader`, async () => {
      const r = await simulate(seed);
      const byTerm = new Map<number, Set<string>>();
      for (const l of r.leaders) byTerm.set(l.term, (byTerm.get(l.term) ?? new Set()).add(l.name));
      for (const [term, names] of byTerm) expect({ term, n: names.size }).toEqual({ term, n: 1 });
      const votes = new Map<string, string>();
      for (const v of r.votes) {
        const k = `${v.voter}@${v.term}`;
        expect(votes.get(k) ?? v.candidate).toBe(v.candidate);
        votes.set(k, v.candidate);
      }
      expect(r.violations).toEqual([]);
      expect(r.leaders.length).toBeGreaterThan(0);
      // every phase either kept a majority connected (and elected) or cut it: most phases end led
      expect(r.recovered).toBeGreaterThanOrEqual(Math.floor(r.phases / 2));
    }, 60_000);
  }
});
