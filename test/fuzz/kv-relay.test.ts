// Issue 22 "Proof": seeded fuzzing of the KV relay frames (src/cluster/kv-relay.ts): the owner's
// `since(epoch, seq)` answers for any cursor a peer sends, and the reader's applyRelayReply takes
// whatever JSON a peer answers with. A grammar-aware generator drives an owner RelayIndex with
// random stored/removed/cleared updates, polls it the way src/cluster/node.ts does (through a JSON
// round trip), and in hostile cases breaks the replies: wrong types, gaps, repeated and future
// sequence numbers, bad hashes, unknown media, workers that are not the owner's, prototype keys,
// mutated JSON text. Properties: neither side throws; the reader only ever holds the owner's
// pooled workers and never touches its own; a clean exchange converges to the owner's residency.
// Budgets: test/helpers/fuzz.ts.
// Replay a failure: HERD_FUZZ_SEED=<seed> HERD_FUZZ_ONLY=<case> bun test test/fuzz/kv-relay.test.ts
import { expect, test } from "bun:test";
import type { Rng } from "../../src/core/rng.ts";
import { applyRelayReply, RelayIndex, type RelayCursor, type RelayReply } from "../../src/cluster/kv-relay.ts";
import type { Medium } from "../../src/kv/indexer.ts";
import { fuzzSettings, INTERESTING_INTS, mutate, pick, runFuzz, type StepTimer } from "../helpers/fuzz.ts";

const settings = fuzzSettings(20261225, 300);
const OWNER_WORKERS = ["c/w0", "c/w1", "c/w2"];
const MEDIA: Medium[] = ["gpu", "cpu", "disk"];
const JUNK: unknown[] = [null, true, 0, -1, 1.5, "", "x", [], {}, { toString: 1 }, { __proto__: 1 }, 2 ** 53, "ffffffffffffffffff", "-1", "0x1", ...INTERESTING_INTS];

function ownerUpdate(rng: Rng, owner: RelayIndex): void {
  const w = pick(rng, OWNER_WORKERS);
  const r = rng.int(10);
  const hashes = Array.from({ length: 1 + rng.int(8) }, () => BigInt(1 + rng.int(64)) * (rng.int(4) === 0 ? 2n ** 60n + 7n : 1n));
  if (r < 6) owner.apply(w, { kind: "stored", medium: pick(rng, MEDIA), hashes });
  else if (r < 9) owner.apply(w, { kind: "removed", medium: pick(rng, MEDIA), hashes });
  else if (rng.int(2) === 0) owner.clearWorker(w);
  else owner.apply(w, { kind: "cleared" });
}

/** Break one reply the way a buggy or hostile peer could. */
function breakReply(rng: Rng, reply: any): unknown {
  const r = rng.int(12);
  const events: any[] = Array.isArray(reply.events) ? reply.events : [];
  switch (r) {
    case 0:
      return pick(rng, JUNK);
    case 1:
      return { ...reply, epoch: pick(rng, JUNK) };
    case 2:
      return { ...reply, seq: pick(rng, JUNK) };
    case 3:
      return { ...reply, events: pick(rng, JUNK) };
    case 4:
      return { ...reply, snapshot: rng.int(2) === 0 ? pick(rng, JUNK) : [{ w: pick(rng, [...OWNER_WORKERS, "b/mine", pick(rng, JUNK)]), m: pick(rng, [...MEDIA, ...JUNK]), h: rng.int(2) === 0 ? pick(rng, JUNK) : [pick(rng, ["1", "ff", "10000000000000000", "zz", ...JUNK])] }] };
    case 5: // a gap, a repeat or a sequence from the future
      return { ...reply, events: events.map((e) => ({ ...e, s: e.s + pick(rng, [-1, 1, 2, 2 ** 40]) })) };
    case 6: // someone else's worker, or ours
      return { ...reply, events: events.map((e) => ({ ...e, w: pick(rng, ["b/mine", "z/other", ...JUNK]) })) };
    case 7:
      return { ...reply, events: events.map((e) => ({ ...e, m: pick(rng, JUNK), h: pick(rng, JUNK), k: pick(rng, ["stored", "removed", "cleared", ...JUNK]) })) };
    case 8: // the same event twice
      return { ...reply, events: [...events, ...events] };
    case 9: // many events, valid sequence numbers, bogus payloads
      return { ...reply, events: Array.from({ length: 2000 }, (_, i) => ({ s: (events[0]?.s ?? 1) + i, w: pick(rng, OWNER_WORKERS), k: "stored", m: "gpu", h: [(i % 64).toString(16)] })) };
    default: {
      const text = mutate(rng, new TextEncoder().encode(JSON.stringify(reply)));
      try {
        return JSON.parse(new TextDecoder().decode(text));
      } catch {
        return undefined; // the client's fetch would have failed: not a reply
      }
    }
  }
}

function residency(index: RelayIndex, keep: (w: string) => boolean): string[] {
  const out: string[] = [];
  index.forEachEntry((w, h, m) => {
    if (keep(w)) out.push(`${w} ${m} ${h.toString(16)}`);
  });
  return out.sort();
}

function poll(owner: RelayIndex, reader: RelayIndex, cursor: RelayCursor, known: Set<string>, timer: StepTimer, hostile: (r: RelayReply) => unknown): RelayCursor {
  const reply = timer.step("since", () => owner.since(cursor.epoch, cursor.seq));
  const wire = hostile(JSON.parse(JSON.stringify(reply)) as RelayReply);
  if (wire === undefined) return cursor;
  const pooled = (w: string) => OWNER_WORKERS.includes(w);
  return timer.step("applyRelayReply", () => applyRelayReply(reader, cursor, wire as RelayReply, pooled, known));
}

test(`seed ${settings.seed}: ${settings.cases} KV relay exchanges, clean and hostile`, async () => {
  const stats = await runFuzz("kv-relay", settings, (rng, timer) => {
    const owner = new RelayIndex(`e${rng.int(3)}`);
    const reader = new RelayIndex("r");
    reader.apply("b/mine", { kind: "stored", medium: "gpu", hashes: [1n, 2n, 3n] });
    const mine = residency(reader, (w) => w === "b/mine");
    let cursor: RelayCursor = { epoch: "", seq: 0 };
    const known = new Set<string>();
    const hostileRate = rng.int(3) === 0 ? 0 : 1 + rng.int(4); // one in hostileRate polls is broken
    const rounds = 1 + rng.int(12);
    for (let i = 0; i < rounds; i++) {
      for (let u = rng.int(rng.int(40) === 0 ? 5000 : 20); u > 0; u--) ownerUpdate(rng, owner);
      const bad = hostileRate > 0 && rng.int(hostileRate) === 0;
      cursor = poll(owner, reader, cursor, known, timer, (r) => (bad ? breakReply(rng, r) : r));
      // Owner side: any cursor at all yields a well-formed answer.
      const odd = timer.step("since(junk)", () => owner.since(pick(rng, [owner.epoch, "", "x"]), pick(rng, [0, -1, 1, owner.sequence, owner.sequence + 1, 2 ** 53, 1e308, NaN])));
      expect(typeof odd.epoch).toBe("string");
      expect(Number.isSafeInteger(odd.seq)).toBe(true);
      expect(residency(reader, (w) => !OWNER_WORKERS.includes(w) && w !== "b/mine")).toEqual([]);
      expect(residency(reader, (w) => w === "b/mine")).toEqual(mine);
    }
    // Clean polls from here on: the reader converges (a gap resyncs through a snapshot).
    if (hostileRate === 0) {
      cursor = poll(owner, reader, cursor, known, timer, (r) => r);
      expect(residency(reader, (w) => OWNER_WORKERS.includes(w))).toEqual(residency(owner, (w) => OWNER_WORKERS.includes(w)));
    }
  });
  console.log(`kv-relay fuzz: ${stats.cases} cases, longest step ${stats.longestStepMs.toFixed(1)} ms, longest loop stall ${stats.longestStallMs.toFixed(1)} ms (case ${stats.stallCase}), RSS +${(stats.rssGrowthBytes / 2 ** 20).toFixed(1)} MiB`);
}, 120_000);
