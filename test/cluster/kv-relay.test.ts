// The KV relay between two indexes (owner c, reader a), through the JSON the peer API carries:
// updates in sequence, a gap (log overrun) or a restarted owner (new epoch) resyncs from a
// snapshot, remote residency is never relayed onward, unpooled workers are not applied.
import { describe, expect, test } from "bun:test";
import { KV_RELAY_LOG_MAX, RelayIndex, applyRelayReply, type RelayCursor, type RelayReply } from "../../src/cluster/kv-relay.ts";

const wire = (r: RelayReply): RelayReply => JSON.parse(JSON.stringify(r));
const hs = (...xs: number[]) => xs.map((x) => BigInt(x) * 0x1_0000_0001n + 0xfedc_ba98_0000_0000n);

function pair(epoch = "e1") {
  const owner = new RelayIndex(epoch);
  const reader = new RelayIndex("r1");
  let cursor: RelayCursor = { epoch: "", seq: 0 };
  const known = new Set<string>();
  const pooled = (w: string) => w.startsWith("c/");
  const poll = () => {
    const reply = wire(owner.since(cursor.epoch, cursor.seq));
    cursor = applyRelayReply(reader, cursor, reply, pooled, known);
    return reply;
  };
  return { owner, reader, poll, cursor: () => cursor };
}

describe("kv relay", () => {
  test("first poll is a snapshot, later ones carry updates in sequence; overlap appears on the reader", () => {
    const { owner, reader, poll, cursor } = pair();
    owner.apply("c/sim-0", { kind: "stored", medium: "gpu", hashes: hs(1, 2, 3) });
    expect(poll().snapshot).toHaveLength(1);
    expect(reader.findMatches(hs(1, 2, 3, 4)).get("c/sim-0")).toEqual({ gpu: 3, cpu: 0, disk: 0 });
    owner.apply("c/sim-0", { kind: "stored", medium: "gpu", hashes: hs(4) });
    owner.apply("c/sim-0", { kind: "removed", medium: "gpu", hashes: hs(2) });
    const r = poll();
    expect(r.snapshot).toBeUndefined();
    expect(r.events!.map((e) => e.s)).toEqual([2, 3]);
    expect(cursor().seq).toBe(3);
    expect(reader.findMatches(hs(1, 2, 3, 4)).get("c/sim-0")).toEqual({ gpu: 1, cpu: 0, disk: 0 });
    owner.clearWorker("c/sim-0");
    poll();
    expect(reader.findMatches(hs(1)).has("c/sim-0")).toBe(false);
  });

  test("a reader behind the bounded log, or an owner restarted with a new epoch, gets a snapshot", () => {
    const { owner, reader, poll } = pair();
    owner.apply("c/sim-0", { kind: "stored", medium: "gpu", hashes: hs(1) });
    poll();
    for (let i = 0; i < KV_RELAY_LOG_MAX + 5; i++) owner.apply("c/sim-0", { kind: i % 2 ? "removed" : "stored", medium: "cpu", hashes: hs(100 + i) });
    owner.apply("c/sim-0", { kind: "stored", medium: "gpu", hashes: hs(2) });
    expect(poll().snapshot).toBeDefined(); // gap: resync from the owner's snapshot
    expect(reader.findMatches(hs(1, 2)).get("c/sim-0")!.gpu).toBe(2);
    // The owner restarts: empty index, new epoch. The reader's stale residency goes.
    const again = new RelayIndex("e2");
    const reply = again.since("e1", 9);
    expect(reply.snapshot).toEqual([]);
  });

  test("remote residency is not relayed onward; workers that are not pooled are not applied", () => {
    const { owner, reader, poll } = pair();
    owner.apply("c/sim-0", { kind: "stored", medium: "gpu", hashes: hs(1) });
    owner.apply("x/other", { kind: "stored", medium: "gpu", hashes: hs(1) }); // c relays it, a does not pool it
    poll();
    expect([...reader.findMatches(hs(1)).keys()]).toEqual(["c/sim-0"]);
    // The reader's own relay log holds nothing of c's worker, and its snapshot leaves it out.
    expect(reader.sequence).toBe(0);
    expect(reader.since("", 0).snapshot).toEqual([]);
    reader.removeRemote("c/sim-0");
    expect(reader.findMatches(hs(1)).size).toBe(0);
    expect(reader.sequence).toBe(0);
  });

  test("a reply whose updates do not follow the cursor resets it (next poll: snapshot)", () => {
    const reader = new RelayIndex("r");
    const c = applyRelayReply(reader, { epoch: "e", seq: 5 }, { epoch: "e", seq: 9, events: [{ s: 7, w: "c/0", k: "cleared" }] }, () => true, new Set());
    expect(c).toEqual({ epoch: "", seq: 0 });
  });
});
