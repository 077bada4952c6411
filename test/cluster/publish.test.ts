import { describe, expect, test } from "bun:test";
import { advertise, decodeAdvert, encodeAdvert, poolWorkers, type ModelCard } from "../../src/cluster/publish.ts";
import { TermFence } from "../../src/cluster/fence.ts";
import type { Worker } from "../../src/workers/worker.ts";
import { emptyLoad } from "../../src/workers/worker.ts";

const w = (id: string, node: string, model = "m"): Worker => ({ id, node, model, role: "aggregated", kind: "sim", url: "http://127.0.0.1:1", state: "ready", load: { ...emptyLoad(), in_flight: 2, kv_usage: 0.5 }, restarts: 0 });
const card = (over: Partial<ModelCard> = {}): ModelCard => ({ model: "m", block_size: 16, tokenizer_checksum: "abc", hash_seed: 0, ...over });
const roundTrip = (node: string, workers: Worker[], cards: ModelCard[]) => decodeAdvert({ name: node, meta: encodeAdvert(advertise(node, workers, cards)) })!;

describe("worker publication and consistency", () => {
  test("a node publishes only its own workers, with load summary and KV capacity", () => {
    const a = advertise("a", [w("a/0", "a"), w("b/0", "b")], [card()], new Map([["a/0", 4096]]));
    expect(a.workers).toEqual([{ id: "a/0", model: "m", role: "aggregated", kind: "sim", state: "ready", load: { in_flight: 2, running: null, waiting: null, kv_usage: 0.5 }, kv_capacity_blocks: 4096 }]);
  });

  test("matching cards pool every remote worker, named by their node", () => {
    const local = advertise("a", [w("a/0", "a")], [card()]);
    const r = poolWorkers(local, [roundTrip("b", [w("b/0", "b")], [card()]), roundTrip("c", [w("c/0", "c"), w("c/1", "c")], [card()])]);
    expect(r.refused).toEqual([]);
    expect(r.workers.map((x) => `${x.node}:${x.id}`)).toEqual(["b:b/0", "c:c/0", "c:c/1"]);
    expect(r.workers[0]!.url).toBe(""); // remote engines stay on their loopback
    expect(r.workers[0]!.kind).toBe("sim"); // the owner's engine kind rides in the advert
  });

  test("a mismatched block size is refused with an error naming the node and the field", () => {
    const local = advertise("a", [w("a/0", "a")], [card()]);
    const r = poolWorkers(local, [roundTrip("b", [w("b/0", "b")], [card()]), roundTrip("c", [w("c/0", "c")], [card({ block_size: 32 })])]);
    expect(r.workers.map((x) => x.id)).toEqual(["b/0"]);
    expect(r.refused).toHaveLength(1);
    expect(r.refused[0]!.message).toBe("node c: model m has block_size 32 but a has 16; its m workers are not pooled");
  });

  test("tokenizer checksum and hash seed are checked too; without a local card the first node by name is the reference", () => {
    const local = advertise("z", [], []);
    const r = poolWorkers(local, [
      roundTrip("c", [w("c/0", "c")], [card({ hash_seed: 7 })]),
      roundTrip("b", [w("b/0", "b")], [card()]),
      roundTrip("d", [w("d/0", "d")], [card({ tokenizer_checksum: "zzz" })]),
    ]);
    expect(r.workers.map((x) => x.id)).toEqual(["b/0"]);
    expect(r.refused.map((m) => `${m.node}.${m.field}`)).toEqual(["c.hash_seed", "d.tokenizer_checksum"]);
  });

  test("malformed adverts are ignored; workers without a card are not pooled", () => {
    expect(decodeAdvert({ name: "x", meta: { advert: "{not json" } })).toBeNull();
    expect(decodeAdvert({ name: "x", meta: {} })).toBeNull();
    const a = decodeAdvert({ name: "x", meta: { advert: JSON.stringify({ node: "spoof", models: [], workers: [{ id: "x/0", model: "m", role: "aggregated", state: "ready" }, { id: 5 }] }) } })!;
    expect(a.node).toBe("x");
    expect(a.workers).toHaveLength(1);
    expect(poolWorkers(advertise("a", [], [card()]), [a]).workers).toEqual([]);
  });
});

describe("TermFence", () => {
  test("stale terms and a second leader in one term are refused; a higher term is persisted first", () => {
    const persisted: number[] = [];
    const f = new TermFence(0, null, (t) => persisted.push(t));
    expect(f.admit(3, "a").ok).toBe(true);
    expect(f.admit(3, "a").ok).toBe(true);
    expect(f.admit(3, "b")).toMatchObject({ ok: false, reason: "conflicting_leader" });
    expect(f.admit(2, "c")).toMatchObject({ ok: false, reason: "stale_term", maxTerm: 3 });
    expect(f.admit(5, "b").ok).toBe(true);
    expect(persisted).toEqual([3, 5]);
    const failing = new TermFence(1, "a", () => {
      throw new Error("disk full");
    });
    expect(() => failing.admit(2, "b")).toThrow("disk full");
    expect(failing.term).toBe(1);
  });
});
