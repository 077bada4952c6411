import { describe, expect, test } from "bun:test";
import { Router } from "../../src/router/router.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { registryWith, req, routerConfig, workers } from "./fixtures.ts";

/** Seeded 64-bit hashes: prompts built from the same `doc` share a prefix. */
function hashes(rng: SeededRng, n: number): bigint[] {
  return Array.from({ length: n }, () => (BigInt(rng.int(2 ** 32)) << 32n) | BigInt(rng.int(2 ** 32)));
}
const pairsOf = (hs: readonly bigint[]) => {
  const p = new Uint32Array(2 * hs.length);
  hs.forEach((h, i) => {
    p[2 * i] = Number(h & 0xffffffffn);
    p[2 * i + 1] = Number(h >> 32n);
  });
  return p;
};

function setup() {
  const rng = new SeededRng(3);
  const index = new BlockIndex();
  const docs = [hashes(rng, 300), hashes(rng, 40), hashes(rng, 2)];
  index.apply("w1", { kind: "stored", medium: "gpu", hashes: docs[0]!.slice(0, 250) });
  index.apply("w2", { kind: "stored", medium: "cpu", hashes: docs[0]! });
  index.apply("w3", { kind: "stored", medium: "gpu", hashes: docs[1]! });
  const router = new Router({ config: routerConfig({ policy: "kv" }), registry: registryWith(workers(4)), clock: new VirtualClock(), rng: new SeededRng(9), kvIndex: index });
  return { router, docs, rng };
}

describe("RouteRequest.blockHashPairs", () => {
  test("routing with the u32 halves given decides exactly as with the bigint hashes alone", () => {
    const a = setup();
    const b = setup();
    const leases: { release(): void }[] = [];
    for (let i = 0; i < 60; i++) {
      const doc = a.docs[i % 3]!;
      const h = [...doc, ...hashes(a.rng, 1 + (i % 5))];
      const base = { promptTokens: h.length * 16 + 3, blockHashes: h, blockSize: 16 };
      const x = a.router.routeAndBook(req(base));
      const y = b.router.routeAndBook(req({ ...base, blockHashPairs: pairsOf(h) }));
      expect(y.worker.id).toBe(x.worker.id);
      expect(y.decision.candidates).toEqual(x.decision.candidates);
      expect(y.decision.predictedCachedTokens).toBe(x.decision.predictedCachedTokens!);
      if (i % 4 === 0) leases.push(x.lease, y.lease);
      else {
        x.lease.release();
        y.lease.release();
      }
    }
    for (const l of leases) l.release();
    for (const w of ["w0", "w1", "w2", "w3"]) expect(b.router.activeBlocks(w)).toBe(0);
  });

  test("the kv match reads the pairs when given (and ignores too short ones)", () => {
    const { router, docs } = setup();
    const h = docs[0]!;
    const overlapOf = (over: Parameters<typeof req>[0]) =>
      router.explain(req({ promptTokens: h.length * 16, blockHashes: h, blockSize: 16, ...over })).decision.candidates.find((c) => c.worker === "w1")!.terms;
    const plain = overlapOf({});
    expect(plain.overlap_gpu).toBe(250);
    // Halves of another prompt: w1 holds none of it, which only the pairs can have told the match.
    const other = pairsOf(docs[1]!.concat(docs[1]!, docs[1]!, docs[1]!, docs[1]!, docs[1]!, docs[1]!, docs[1]!));
    expect(overlapOf({ blockHashPairs: other }).overlap_gpu).toBe(0);
    expect(overlapOf({ blockHashPairs: other.subarray(0, 10) })).toEqual(plain);
  });
});
