// The ingest threads' op stream (src/kv/op-stream.ts) and the applier both modes share
// (src/kv/index-sink.ts): records come back in order with their media and hashes, a removed
// stream's records are skipped, a malformed buffer is refused, and a herd hash named by two engine
// hashes stays indexed until both are removed.
import { describe, expect, test } from "bun:test";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { IndexApplier, type WorkerIndexSink } from "../../src/kv/index-sink.ts";
import { applyOps, OpWriter } from "../../src/kv/op-stream.ts";

const pairs = (...hs: number[]) => new Uint32Array(hs.flatMap((h) => [h, h + 0x10000]));

function recorder(log: string[], name: string): WorkerIndexSink {
  return {
    stored: (m, p, n) => log.push(`${name} stored ${m} ${[...p.subarray(0, 2 * n)].join(",")}`),
    removed: (m, p, n) => log.push(`${name} removed ${m} ${[...p.subarray(0, 2 * n)].join(",")}`),
    cleared: () => log.push(`${name} cleared`),
  };
}

describe("op stream", () => {
  test("records come back in order; a stream without a sink is skipped; empty writes write nothing", () => {
    let writes = 0;
    const w = new OpWriter(() => writes++);
    const a = w.sink(1);
    const b = w.sink(2);
    a.stored("gpu", pairs(1, 2, 3), 2);
    b.removed("cpu", pairs(7), 1);
    a.removed("disk", pairs(9), 0); // nothing
    b.cleared();
    a.removed("gpu", pairs(2), 1);
    expect(writes).toBe(4);
    expect(w.blocks).toBe(4);
    const words = w.take()!;
    expect(w.take()).toBeNull();
    const log: string[] = [];
    const n = applyOps(words, (id) => (id === 1 ? recorder(log, "a") : id === 2 ? recorder(log, "b") : null));
    expect(n).toBe(4);
    expect(log).toEqual([`a stored gpu 1,65537,2,65538`, `b removed cpu 7,65543`, `b cleared`, `a removed gpu 2,65538`]);
    const onlyA: string[] = [];
    expect(applyOps(words, (id) => (id === 1 ? recorder(onlyA, "a") : null))).toBe(3);
    expect(onlyA).toHaveLength(2);
  });

  test("a truncated or corrupt buffer is refused", () => {
    const w = new OpWriter();
    w.sink(1).stored("gpu", pairs(1, 2), 2);
    const words = w.take()!;
    const none = () => null;
    expect(() => applyOps(words.subarray(0, words.length - 1), none)).toThrow(/bad record/);
    expect(() => applyOps(words.subarray(0, 2), none)).toThrow(/truncated/);
    const bad = words.slice();
    bad[2] = 9; // no such medium
    expect(() => applyOps(bad, none)).toThrow(/bad record/);
  });
});

describe("IndexApplier", () => {
  test("a block two engine hashes name stays indexed until both are removed; counters after dedup", () => {
    const ix = new BlockIndex();
    const a = new IndexApplier("w", ix);
    a.stored("gpu", pairs(5), 1);
    a.stored("gpu", pairs(5), 1); // the second engine hash: already held
    expect(a.counters).toEqual({ blocksStored: 1, blocksRemoved: 0 });
    a.removed("gpu", pairs(5), 1);
    expect(ix.size()).toBe(1);
    a.removed("gpu", pairs(5), 1);
    expect(ix.size()).toBe(0);
    expect(a.counters).toEqual({ blocksStored: 1, blocksRemoved: 1 });
    a.stored("cpu", pairs(6), 1);
    a.stored("cpu", pairs(6), 1);
    a.cleared(); // forgets the extra holder with the blocks
    a.stored("cpu", pairs(6), 1);
    a.removed("cpu", pairs(6), 1);
    expect(ix.size()).toBe(0);
  });
});
