// Steady-state KV event ingest of two or more source trees in ONE process, rounds alternating
// between them (issue 25): on a shared box, run-to-run noise (±30 % here) hides a 5 % change, and
// an in-process A/B with rotating order is the fairest comparison. Each tree gets its own world
// (16 engine workers at capacity, ~1M blocks, capacity hints), the same seeded events, and its own
// copy of every module (imported from its path).
// Run: KV_AB_ROOTS=/path/to/before,/path/to/after ./node_modules/.bin/bun bench/kv-ingest-ab.ts
//   (default: this tree against itself, a noise check); KV_AB_ROUNDS (12, after one warm-up round), KV_AB_BATCHES (2,000
//   batches per round: 28 BlockRemoved + one 28-block BlockStored each), KV_AB_BLOCKS_PER_WORKER.
import { loadavg } from "node:os";
import { resolve } from "node:path";

const here = resolve(import.meta.dir, "..");
const ROOTS = (process.env.KV_AB_ROOTS ?? `${here},${here}`).split(",").map((r) => resolve(r));
const W = 16;
const BS = 16;
const PB = 28; // blocks per prompt after the 4-block system prompt
const PER = Number(process.env.KV_AB_BLOCKS_PER_WORKER ?? 61_000);
const N = Number(process.env.KV_AB_BATCHES ?? 2_000);
const ROUNDS = Number(process.env.KV_AB_ROUNDS ?? 12);
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

interface Stream {
  message(frames: readonly Uint8Array[]): void;
}

async function world(root: string) {
  const { SeededRng } = await import(`${root}/src/core/rng.ts`);
  const { VirtualClock } = await import(`${root}/src/core/clock.ts`);
  const { BlockIndex } = await import(`${root}/src/kv/block-index.ts`);
  const { KvIngest } = await import(`${root}/src/kv/ingest-manager.ts`);
  const { blockRemoved, blockStored, encodeKvEventBatch } = await import(`${root}/src/protocol/kv-encode.ts`);
  const { seqFrame } = await import(`${root}/src/protocol/kv-frames.ts`);
  const rng = new SeededRng(1);
  const index = new BlockIndex();
  const kv = new KvIngest(index, new VirtualClock());
  const source = { start: () => {}, close: () => {} };
  const toks = (n: number) => Array.from({ length: n * BS }, () => rng.int(150_000));
  const ws = Array.from({ length: W }, (_, w) => ({
    stream: kv.addWorker(`w${w}`, source, null, { capacityBlocks: PER + 8 }) as Stream,
    seq: 0n,
    next: BigInt(w) << 40n,
    sys: 0n,
    prompts: [] as bigint[][],
  }));
  type X = (typeof ws)[number];
  const frame = (x: X, events: unknown[], ts: number) => [new Uint8Array(0), seqFrame(x.seq++), encodeKvEventBatch({ ts, events }, "map")];
  const store = (x: X) => {
    const hashes = Array.from({ length: PB }, () => ++x.next);
    x.prompts.push(hashes);
    return blockStored({ blockHashes: hashes, parentBlockHash: x.sys, tokenIds: toks(PB), blockSize: BS });
  };
  for (const x of ws) {
    const sys = Array.from({ length: 4 }, () => ++x.next);
    x.sys = x.next;
    x.stream.message(frame(x, [blockStored({ blockHashes: sys, parentBlockHash: null, tokenIds: toks(4), blockSize: BS })], 1));
    while (x.prompts.length * PB < PER) x.stream.message(frame(x, [store(x)], 1));
  }
  const batches = () =>
    Array.from({ length: N }, (_, i) => {
      const x = ws[i % W]!;
      return { x, frames: frame(x, [...x.prompts.shift()!.map((h) => blockRemoved([h])), store(x)], 2 + i) };
    });
  return { root, batches, entries: () => index.stats().entries as number };
}

const worlds: Awaited<ReturnType<typeof world>>[] = [];
for (const r of ROOTS) worlds.push(await world(r));
// All rounds' batches first (encoding is not measured), then rounds with the trees' order rotated.
// Round 0 is a warm-up, not counted: the fill above never removed a block, so the removal path's
// JIT tiers come up in it (with one tree given twice, both share modules and only the first to
// run would pay).
const rounds = Array.from({ length: ROUNDS + 1 }, () => worlds.map((w) => w.batches()));
const cpu: number[][] = worlds.map(() => []);
for (const w of worlds) for (const b of rounds[0]![worlds.indexOf(w)]!) b.x.stream.message(b.frames);
for (let r = 1; r <= ROUNDS; r++) {
  for (let k = 0; k < worlds.length; k++) {
    const i = (k + r) % worlds.length;
    Bun.gc(true);
    const c = cpuMs();
    for (const b of rounds[r]![i]!) b.x.stream.message(b.frames);
    cpu[i]!.push(cpuMs() - c);
  }
}
const first = worlds[0]!.entries();
for (const w of worlds) if (w.entries() !== first) throw new Error(`trees disagree: ${w.root} indexes ${w.entries()} blocks, ${worlds[0]!.root} ${first}`);
const events = 2 * N * PB;
const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[xs.length >> 1]!;
console.log(`kv-ingest-ab: ${W} workers × ${PER.toLocaleString("en-US")} blocks, ${ROUNDS} rounds of ${events.toLocaleString("en-US")} block events, load average ${loadavg().map((x) => x.toFixed(1)).join(" ")}`);
for (let i = 0; i < worlds.length; i++) {
  const rates = cpu[i]!.map((ms) => events / ms / 1000);
  const speed = cpu[i]!.map((ms, r) => cpu[0]![r]! / ms);
  const gm = Math.exp(speed.reduce((a, x) => a + Math.log(x), 0) / speed.length);
  console.log(`  ${worlds[i]!.root}: M block events per CPU-s median ${med(rates).toFixed(2)}, best ${Math.max(...rates).toFixed(2)}; speed vs the first tree, per round: geometric mean ${gm.toFixed(3)} [${speed.map((x) => x.toFixed(2)).join(" ")}]`);
}
