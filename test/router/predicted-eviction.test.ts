// Issue 11: kv's predicted entries (the blocks of its own recent decisions, counted as cached until
// the engine's BlockStored events arrive) must not outlive the engine's eviction of those blocks.
// The KV index tells the router what a worker lost (KvIndex.onRemoved); the prediction goes at once.
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import type { KvIndex, RemovalListener } from "../../src/kv/indexer.ts";
import { PrefixMemory } from "../../src/router/prefix-memory.ts";
import { Router } from "../../src/router/router.ts";
import { registryWith, req, routerConfig, workers } from "./fixtures.ts";

const prompt = (n: number, base = 1000n) => Array.from({ length: n }, (_, i) => base + BigInt(i));
const pairsOf = (hs: readonly bigint[]) => new Uint32Array(new BigUint64Array(hs).buffer);

describe("PrefixMemory.dropRemoved", () => {
  test("a removed block ends the worker's run there; the rest of the memory stands", () => {
    const m = new PrefixMemory(2000, 1000);
    const p = prompt(10);
    const q = prompt(6, 5000n);
    m.record("a", p, 0);
    m.record("a", q, 10);
    m.record("b", p, 0);
    expect(m.dropRemoved("a", pairsOf([p[4]!]), 1)).toBe(1);
    expect(m.overlaps(p, 100).get("a")).toBe(4);
    expect(m.overlaps(q, 100).get("a")).toBe(6); // another prompt's prediction is untouched
    expect(m.overlaps(p, 100).get("b")).toBe(10); // and so is another worker's
    expect(m.dropRemoved("a", pairsOf([p[0]!]), 1)).toBe(1);
    expect(m.overlaps(p, 100).has("a")).toBe(false);
  });

  test("sending the prompt again restores the whole prefix; a block never remembered changes nothing", () => {
    const m = new PrefixMemory(2000, 1000);
    const p = prompt(10);
    m.record("a", p, 0);
    expect(m.dropRemoved("a", pairsOf([999_999n]), 1)).toBe(0);
    m.dropRemoved("a", pairsOf([p[2]!, p[7]!]), 2);
    expect(m.overlaps(p, 5).get("a")).toBe(2);
    m.record("a", p, 5); // same TTL slice as the first send: must still re-record the hole
    expect(m.overlaps(p, 10).get("a")).toBe(10);
  });

  test("past the TTL the orphans have expired and lookups are back to the binary search", () => {
    const m = new PrefixMemory(640, 1000);
    const p = prompt(80);
    m.record("a", p, 0);
    m.dropRemoved("a", pairsOf([p[30]!]), 1);
    expect(m.overlaps(p, 1).get("a")).toBe(30);
    expect(m.overlaps(p, 700).has("a")).toBe(false); // expired, holes or not
    m.record("a", p, 700);
    expect(m.overlaps(p, 701).get("a")).toBe(80);
  });
});

describe("kv policy: predictions follow the KV index's removals", () => {
  const setup = (index: KvIndex = new BlockIndex()) => {
    const cfg = routerConfig({ policy: "kv" });
    const router = new Router({ config: cfg, registry: registryWith(workers(2)), clock: new VirtualClock(), rng: new SeededRng(1), kvIndex: index });
    const p = prompt(12);
    const r = req({ promptTokens: 12 * 16, blockHashes: p, blockSize: 16 });
    const chosen = router.route(r).worker.id;
    const predicted = () => router.explain(r).decision.candidates.find((c) => c.worker === chosen)!.terms.predicted_gpu;
    return { router, index, p, chosen, predicted };
  };

  test("a GPU removal of a predicted block cuts the prediction at that block", () => {
    const { index, p, chosen, predicted } = setup();
    expect(predicted()).toBe(12);
    index.apply(chosen, { kind: "removed", medium: "gpu", hashes: [p[5]!] });
    expect(predicted()).toBe(5);
  });

  test("a removal on another medium or worker changes nothing; clearing the worker drops all", () => {
    const { index, p, chosen, predicted } = setup();
    index.apply(chosen, { kind: "removed", medium: "cpu", hashes: [p[0]!] });
    index.apply(chosen === "w0" ? "w1" : "w0", { kind: "removed", medium: "gpu", hashes: [p[0]!] });
    expect(predicted()).toBe(12);
    index.apply(chosen, { kind: "cleared" });
    expect(predicted()).toBe(0);
  });

  test("router.close() unsubscribes from the index", () => {
    const listeners = new Set<RemovalListener>();
    const base = new BlockIndex();
    const spy: KvIndex = Object.assign(Object.create(base) as BlockIndex, {
      onRemoved(l: RemovalListener) {
        listeners.add(l);
        const off = base.onRemoved(l);
        return () => (listeners.delete(l), off());
      },
    });
    const { router } = setup(spy);
    expect(listeners.size).toBe(3); // the policy and the two P/D leg presets, each with its own predictions
    router.close();
    expect(listeners.size).toBe(0);
  });
});
