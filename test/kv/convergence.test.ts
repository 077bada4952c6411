// R11 (docs/references.md#reliability-R11): drops, duplicates, reordering and publisher restarts converge to the engine's true cache.
// Several modelled vLLM engines publish through faulty links into one BlockIndex; the index is
// compared with the engines' real caches (herd hashes per medium).
import { describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng, type Rng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { KvIngest } from "../../src/kv/ingest-manager.ts";
import type { KvEventSink } from "../../src/kv/ingest.ts";
import { EngineModel, FaultyLink, modelReplayer, PublisherModel, type LinkFaults } from "./engine-model.ts";

const BS = 4;

interface Scenario {
  seed: number;
  workers: number;
  steps: number;
  bufferSteps: number;
  faults: LinkFaults;
  replayFail: number;
  restartProb: number;
  resetProb: number;
  /** KV capacity hint given to even-numbered workers (odd ones get none); absent = no hints. */
  capacityBlocks?: number;
}

function setup(sc: Scenario) {
  const rng = new SeededRng(sc.seed);
  const clock = new VirtualClock();
  const index = new BlockIndex(64);
  const ingest = new KvIngest(index, clock);
  const systemPrompts = Array.from({ length: 5 }, () => Array.from({ length: 8 + rng.int(40) }, () => rng.int(30_000)));
  const workers = Array.from({ length: sc.workers }, (_, i) => {
    const id = `gpu-0${i % 2}/w${i}`;
    const wrng = rng.fork();
    const engine = new EngineModel(wrng, BS, { GPU: 48, CPU: 64 });
    const pub = new PublisherModel(clock, sc.bufferSteps, i % 2 === 0 ? "map" : "array");
    let sink: KvEventSink | null = null;
    ingest.addWorker(id, { start: (s) => void (sink = s), close: () => {} }, modelReplayer(clock, wrng, () => pub, 3, sc.replayFail), {
      replayTimeoutMs: 50,
      ...(sc.capacityBlocks !== undefined && i % 2 === 0 ? { capacityBlocks: sc.capacityBlocks } : {}),
    });
    const link = new FaultyLink(wrng, { message: (f) => sink!.message(f), connection: (up) => sink!.connection(up) }, sc.faults);
    sink!.connection(true);
    return { id, engine, pub, link, sink: () => sink!, rng: wrng };
  });
  const prompt = (r: Rng) => {
    const sys = systemPrompts[r.int(systemPrompts.length)]!;
    return [...sys, ...Array.from({ length: r.int(3) * BS + r.int(BS) }, () => r.int(30_000))];
  };
  const settle = async (ms: number) => {
    for (let i = 0; i < ms; i++) {
      clock.advance(1);
      for (let k = 0; k < 4; k++) await Promise.resolve();
    }
  };
  return { rng, clock, index, ingest, workers, prompt, settle };
}

type World = ReturnType<typeof setup>;

async function step(w: World, sc: Scenario) {
  const x = w.workers[w.rng.int(w.workers.length)]!;
  const r = x.rng.float();
  if (r < sc.restartProb) {
    // The process dies: the SUB's TCP connection drops and comes back to the new process.
    x.engine.restart();
    x.pub.restart();
    x.sink().connection(false);
    x.sink().connection(true);
  } else if (r < sc.restartProb + sc.resetProb) {
    x.link.send(x.pub.publish(x.engine.reset()));
  } else {
    const events = x.engine.serve(w.prompt(x.rng));
    if (events.length > 0) x.link.send(x.pub.publish(events));
  }
  await w.settle(1);
}

/** Every index residency, as `${hash}|${medium}` per worker. */
function indexContent(index: BlockIndex): Map<string, Set<string>> {
  const m = new Map<string, Set<string>>();
  index.forEachEntry((worker, h, medium) => {
    let s = m.get(worker);
    if (!s) m.set(worker, (s = new Set()));
    s.add(`${h}|${medium}`);
  });
  return m;
}

/**
 * A clean stretch: every worker publishes once more over a fault-free link, so a trailing loss
 * shows up as a gap (a subscriber cannot notice a lost last message until the next one arrives).
 */
async function quiesce(w: World) {
  const saved = w.workers.map((x) => x.link.faults);
  for (const x of w.workers) {
    x.link.faults = { drop: 0, duplicate: 0, reorder: 0 };
    x.link.flush();
  }
  for (const x of w.workers) {
    let events = x.engine.serve(w.prompt(x.rng));
    while (events.length === 0) events = x.engine.serve(w.prompt(x.rng));
    x.link.send(x.pub.publish(events));
  }
  await w.settle(400);
  w.workers.forEach((x, i) => (x.link.faults = saved[i]!));
}

function expectExact(w: World) {
  const content = indexContent(w.index);
  for (const x of w.workers) {
    const truth = x.engine.truth();
    const got = content.get(x.id) ?? new Set<string>();
    expect({ worker: x.id, missing: [...truth].filter((e) => !got.has(e)).length, phantom: [...got].filter((e) => !truth.has(e)).length })
      .toEqual({ worker: x.id, missing: 0, phantom: 0 });
    expect(got.size).toBeGreaterThan(0);
  }
}

function expectSound(w: World) {
  const content = indexContent(w.index);
  for (const x of w.workers) {
    const truth = x.engine.truth();
    const phantom = [...(content.get(x.id) ?? [])].filter((e) => !truth.has(e));
    expect(x.sink() && w.ingest.stream(x.id)!.status().replayInFlight).toBe(false);
    expect({ worker: x.id, phantom }).toEqual({ worker: x.id, phantom: [] });
  }
}

describe("index converges to the engines' true caches", () => {
  test("drops, duplicates, reordering, resets and restarts with a replay buffer that covers the gaps", async () => {
    for (const seed of [11, 12]) {
      const sc: Scenario = {
        seed, workers: 3, steps: 700, bufferSteps: 10_000, faults: { drop: 0.12, duplicate: 0.08, reorder: 0.08 },
        replayFail: 0, restartProb: 0.01, resetProb: 0.01,
      };
      const w = setup(sc);
      for (let i = 0; i < sc.steps; i++) await step(w, sc);
      await quiesce(w);
      expectExact(w);
      const st = w.ingest.status();
      expect(st.reduce((a, s) => a + s.gaps, 0)).toBeGreaterThan(5);
      expect(st.reduce((a, s) => a + s.duplicates, 0)).toBeGreaterThan(5);
      expect(st.reduce((a, s) => a + s.restarts, 0)).toBeGreaterThan(0);
      // With every gap replayable, only restarts may clear a worker (its first replay starts at 0).
      expect(st.every((s) => s.replayInFlight === false && s.pendingBatches === 0)).toBe(true);
    }
  });

  test("unreplayable losses never leave phantom blocks, and a restart brings back exactness", async () => {
    const sc: Scenario = {
      seed: 21, workers: 3, steps: 700, bufferSteps: 3, faults: { drop: 0.2, duplicate: 0.05, reorder: 0.1 },
      replayFail: 0.2, restartProb: 0.005, resetProb: 0.005,
    };
    const w = setup(sc);
    for (let i = 0; i < sc.steps; i++) {
      await step(w, sc);
      if (i % 50 === 49) {
        await quiesce(w);
        expectSound(w);
      }
    }
    expect(w.ingest.status().reduce((a, s) => a + s.resyncs, 0)).toBeGreaterThan(3);
    for (const x of w.workers) {
      x.link.faults = { drop: 0, duplicate: 0, reorder: 0 };
      x.engine.restart();
      x.pub.restart();
      x.sink().connection(false);
      x.sink().connection(true);
    }
    await quiesce(w);
    for (let i = 0; i < 100; i++) {
      const x = w.workers[i % w.workers.length]!;
      const ev = x.engine.serve(w.prompt(x.rng));
      if (ev.length > 0) x.link.send(x.pub.publish(ev));
      await w.settle(1);
    }
    await w.settle(200);
    expectExact(w);
  });
});

describe("capacity hints (reserved tables) change no index result", () => {
  // The same seeded run with and without hints: identical event streams, so the indexes must be
  // identical entry for entry and answer every prompt the same. 5,000 blocks per hinted worker sizes
  // the tables past 1,024 slots, so every clear (restart, resync, reset) shrinks them and the
  // stream must size them again.
  test("faulty links with resets, restarts and resyncs: hinted and unhinted runs agree", async () => {
    const base: Scenario = {
      seed: 31, workers: 4, steps: 500, bufferSteps: 3, faults: { drop: 0.15, duplicate: 0.05, reorder: 0.08 },
      replayFail: 0.2, restartProb: 0.01, resetProb: 0.01,
    };
    const runs: World[] = [];
    for (const capacityBlocks of [undefined, 5_000]) {
      const sc: Scenario = capacityBlocks === undefined ? base : { ...base, capacityBlocks };
      const w = setup(sc);
      for (let i = 0; i < sc.steps; i++) await step(w, sc);
      await quiesce(w);
      expectSound(w);
      runs.push(w);
    }
    const [plain, hinted] = runs as [World, World];
    expect(hinted.ingest.stream("gpu-00/w0")!.reservedBlocks).toBe(5_000);
    // No hint: the tables grow, then size themselves at the worker's first eviction (self-size.test.ts).
    const unhinted = ["gpu-01/w1", "gpu-01/w3"].map((id) => hinted.ingest.stream(id)!);
    for (const s of unhinted) expect(s.reservedBlocks === 0 || s.selfSized).toBe(true);
    expect(hinted.ingest.reservedBlocks()).toBe(10_000 + unhinted.reduce((a, s) => a + s.reservedBlocks, 0));
    // Self-sizing ran in the unhinted run too, and changes no result either.
    expect(["gpu-00/w0", "gpu-01/w1", "gpu-00/w2", "gpu-01/w3"].some((id) => plain.ingest.stream(id)!.selfSized)).toBe(true);
    const st = hinted.ingest.status();
    expect(st.reduce((a, s) => a + s.resyncs + s.restarts, 0)).toBeGreaterThan(3);
    expect(indexContent(hinted.index)).toEqual(indexContent(plain.index));
    expect(hinted.index.stats()).toMatchObject({ blocks: plain.index.stats().blocks, entries: plain.index.stats().entries });
    // The reserved index keeps room for the hinted capacity even after clears shrank it.
    expect(hinted.index.stats().bytes!).toBeGreaterThan(plain.index.stats().bytes!);
    const rng = new SeededRng(99);
    let matched = 0;
    for (let i = 0; i < 200; i++) {
      const hashes = blockHashes(hinted.prompt(rng), BS);
      const got = hinted.index.findMatches(hashes);
      expect(got).toEqual(plain.index.findMatches(hashes));
      if (got.size > 0) matched++;
    }
    expect(matched).toBeGreaterThan(100); // the prompts do hit cached prefixes
  });
});
