// KV index benchmark (issue 3 §3): prints figures against the targets
//   ingest  ≥ 1,000,000 stored-block events/s
//   match   ≤ 100 µs for a 2,000-block (32k-token) prompt over 16 workers holding 1M blocks in all
//   memory  ≤ 100 bytes per indexed block
// Run: ./node_modules/.bin/bun bench/kv-index.ts   (one run; numbers vary with machine load)
import { readFileSync } from "node:fs";
import { VirtualClock } from "../src/core/clock.ts";
import { SeededRng } from "../src/core/rng.ts";
import { BlockIndex } from "../src/kv/block-index.ts";
import { blockHashes, chainHashesU32 } from "../src/kv/hash.ts";
import type { KvEventStream } from "../src/kv/ingest.ts";
import { KvIngest } from "../src/kv/ingest-manager.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../src/protocol/kv-encode.ts";
import { seqFrame } from "../src/protocol/kv-frames.ts";
import { KvOps, OP_STORED, readKvOps } from "../src/protocol/kv-events-fast.ts";
import type { KvEvent } from "../src/protocol/kv-events.ts";

const WORKERS = 16;
const BS = 16;
const TOTAL_BLOCKS = Number(process.env.KV_BENCH_BLOCKS ?? 1_000_000);
const PROMPT_BLOCKS = 32; // 512-token prompts
const SHARED_BLOCKS = 4; // a system prompt shared across the cluster
const LONG_BLOCKS = 2_000; // the 32k-token document used for the match benchmark

const rng = new SeededRng(1);
const clock = new VirtualClock();
// Bun's heapUsed includes typed-array storage (its `external` repeats it: do not add both).
const mem = () => {
  Bun.gc(true);
  const m = process.memoryUsage();
  return { heap: m.heapUsed, rss: m.rss };
};
// The machine is shared: rates are given per CPU-second of this process as well as per wall second.
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

const systemPrompts = Array.from({ length: 8 }, () => Array.from({ length: SHARED_BLOCKS * BS }, () => rng.int(150_000)));
const longDoc = Array.from({ length: LONG_BLOCKS * BS }, () => rng.int(150_000));

/** Pre-encode every worker's batches (vLLM map format, one prompt's store per batch). */
/** Per worker, for the churn phase: the next engine hash, its system-prompt tails, its prompts. */
const workerState: { next: bigint; seq: bigint; sysTail: Map<number, bigint>; prompts: bigint[][] }[] = [];

function buildBatches(): { worker: number; frames: Uint8Array[]; blocks: number }[][] {
  const perWorker = Math.floor((TOTAL_BLOCKS - LONG_BLOCKS * 8.5) / WORKERS); // the long doc adds ~8.5 × 2000
  const out: { worker: number; frames: Uint8Array[]; blocks: number }[][] = [];
  for (let w = 0; w < WORKERS; w++) {
    const list: { worker: number; frames: Uint8Array[]; blocks: number }[] = [];
    let seq = 0n;
    let engineHash = BigInt(w) << 40n;
    const push = (tokens: number[], blocks: number, parent: bigint | null) => {
      const hashes = Array.from({ length: blocks }, () => ++engineHash);
      const payload = encodeKvEventBatch({ ts: 1.7e9 + Number(seq), events: [blockStored({ blockHashes: hashes, parentBlockHash: parent, tokenIds: tokens, blockSize: BS })] }, "map");
      list.push({ worker: w, frames: [new Uint8Array(0), seqFrame(seq++), payload], blocks });
    };
    // Worker w holds the first (w+1)/16 of the long document, so a match walks up to 2,000 blocks.
    const longHeld = Math.round(((w + 1) / WORKERS) * LONG_BLOCKS);
    for (let b = 0; b < longHeld; b += 100) {
      const n = Math.min(100, longHeld - b);
      // Stores continue the chain: the parent is the previous batch's last engine hash.
      const hashes = Array.from({ length: n }, () => ++engineHash);
      const parent = b === 0 ? null : hashes[0]! - 1n;
      const payload = encodeKvEventBatch({ ts: 1.7e9 + Number(seq), events: [blockStored({ blockHashes: hashes, parentBlockHash: parent, tokenIds: longDoc.slice(b * BS, (b + n) * BS), blockSize: BS })] }, "map");
      list.push({ worker: w, frames: [new Uint8Array(0), seqFrame(seq++), payload], blocks: n });
    }
    // 512-token prompts opening with one of 8 cluster-wide system prompts: like vLLM, the system
    // prompt's blocks are stored once per worker and later prompts store only their own blocks,
    // parented on the system prompt's last block.
    const sysTail = new Map<number, bigint>();
    const prompts: bigint[][] = [];
    for (let held = longHeld; held < perWorker; ) {
      const si = rng.int(systemPrompts.length);
      let parent = sysTail.get(si) ?? null;
      if (parent === null) {
        push(systemPrompts[si]!, SHARED_BLOCKS, null);
        parent = engineHash;
        sysTail.set(si, parent);
        held += SHARED_BLOCKS;
      }
      const tail = Array.from({ length: (PROMPT_BLOCKS - SHARED_BLOCKS) * BS }, () => rng.int(150_000));
      push(tail, PROMPT_BLOCKS - SHARED_BLOCKS, parent);
      prompts.push(Array.from({ length: PROMPT_BLOCKS - SHARED_BLOCKS }, (_, k) => engineHash - BigInt(PROMPT_BLOCKS - SHARED_BLOCKS - 1 - k)));
      held += PROMPT_BLOCKS - SHARED_BLOCKS;
    }
    workerState.push({ next: engineHash, seq, sysTail, prompts });
    out.push(list);
  }
  return out;
}

const med = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!;
const fmt = (n: number, d = 0) => n.toLocaleString("en-US", { maximumFractionDigits: d, minimumFractionDigits: d });

console.log(`kv-index bench: ${WORKERS} workers, block size ${BS}, ~${fmt(TOTAL_BLOCKS)} blocks, Bun ${Bun.version}, load average ${(await import("node:os")).loadavg().map((x) => x.toFixed(1)).join(" ")}`);
const batches = buildBatches();
const totalBlocks = batches.flat().reduce((a, b) => a + b.blocks, 0);

// 1. Ingest: live frames → decode → Dynamo hashes → engine-hash map → index. Run three times:
//   cold     — first run in the process, from an empty index: JIT warm-up and table growth included;
//   warm     — the same frames into a fresh index and fresh streams (JIT warm, tables grow again);
//   reserved — like warm, through the daemon's path: KvIngest.addWorker with each worker's KV
//              capacity hint (here the blocks it will hold), which sizes its map and the shared
//              index up front: no rebuilds, each table page touched once.
// Table growth is dominated by first touches of fresh memory, which on this VM cost ~100× a
// rewrite of the same memory (figure printed below); each run prints its minor page faults. The
// reserved run also comes third, after the process has freed (and may reuse) earlier garbage.
/** Minor page faults of this process so far (Linux), or NaN: first touches of fresh pages. */
const minorFaults = () => {
  try {
    return Number(readFileSync("/proc/self/stat", "utf8").split(") ")[1]!.split(" ")[7]);
  } catch {
    return NaN;
  }
};

function ingest(hinted: boolean) {
  const f0 = minorFaults();
  const index = new BlockIndex();
  const kv = new KvIngest(index, clock);
  const source = { start: () => {}, close: () => {} };
  // Both through the daemon's path; unhinted = an engine that states no KV capacity.
  const streams = Array.from({ length: WORKERS }, (_, w) =>
    kv.addWorker(`w${w}`, source, null, hinted ? { capacityBlocks: batches[w]!.reduce((a, b) => a + b.blocks, 0) } : {}),
  );
  // Rates per chunk of ~50k blocks, so a burst of load from other processes shows as one slow chunk.
  const chunkRates: number[] = [];
  const chunkCpuRates: number[] = [];
  let chunkBlocks = 0;
  let chunkT = performance.now();
  let chunkC = cpuMs();
  const t0 = performance.now();
  const c0 = cpuMs();
  const cursor = new Array<number>(WORKERS).fill(0);
  for (let done = false; !done; ) {
    done = true;
    for (let w = 0; w < WORKERS; w++) {
      const b = batches[w]![cursor[w]!++];
      if (!b) continue;
      done = false;
      streams[w]!.message(b.frames);
      chunkBlocks += b.blocks;
      if (chunkBlocks >= 50_000) {
        const t = performance.now();
        const c = cpuMs();
        chunkRates.push(chunkBlocks / ((t - chunkT) / 1000));
        chunkCpuRates.push(chunkBlocks / ((c - chunkC) / 1000));
        chunkBlocks = 0;
        chunkT = t;
        chunkC = c;
      }
    }
  }
  const wallS = (performance.now() - t0) / 1000;
  const cpuS = (cpuMs() - c0) / 1000;
  return { index, streams, wallS, cpuS, chunkRates, chunkCpuRates, faults: minorFaults() - f0 };
}

const before = mem();
const cold = ingest(false);
const after = mem();
const { index, streams } = cold;
const ingestS = cold.wallS;
const ingestCpuS = cold.cpuS;
const st = index.stats();
const mapped = streams.reduce((a, s) => a + s.blocks.size, 0);
const mapBytes = streams.reduce((a, s) => a + s.blocks.bytes(), 0);
const warm = ingest(false);
for (const s of warm.streams) if (s.status().blocks.blocksStored === 0) throw new Error("warm ingest stored nothing");
const reserved = ingest(true);
if (reserved.index.stats().entries !== st.entries || warm.index.stats().entries !== st.entries) throw new Error("ingest runs disagree");
// First touch of fresh memory on this machine: allocate and fill 64 MiB, then rewrite it.
const ft = (() => {
  const c = cpuMs();
  const a = new Uint32Array(16 * 1024 * 1024);
  a.fill(1);
  const firstMs = cpuMs() - c;
  const c2 = cpuMs();
  a.fill(2);
  return { firstMsPerMiB: firstMs / 64, againMsPerMiB: (cpuMs() - c2) / 64 };
})();

// Steady state: an engine at capacity evicts as much as it stores. Each batch removes a worker's
// oldest prompt (28 BlockRemoved events, one per block as vLLM emits them) and stores a new one.
// Two stream sets hold the same blocks under the same engine hashes: "unhinted" (the cold run's
// streams: KvIngest.addWorker without a capacity, so each worker's map and the index size
// themselves at the worker's first eviction) and "hinted" (tables sized up front). KV_BENCH_WARMUP
// warm-up reps go into both (JIT warm-up of the removal path, the unhinted set's one-off
// self-sizing), then KV_BENCH_REPS reps alternate which set goes first (defaults 2 and 5 reps of
// KV_BENCH_CHURN = 2,000 batches). The first pass of the removal path in a process runs at well
// under half the later rate (JIT), so a line measured first is not comparable with one measured later.
const CHURN_BATCHES = Number(process.env.KV_BENCH_CHURN ?? 2_000);
const CHURN_REPS = Math.max(1, Number(process.env.KV_BENCH_REPS ?? 5));
const CHURN_WARMUP = Math.max(1, Number(process.env.KV_BENCH_WARMUP ?? 2));
const churnRep = (rep: number): { w: number; frames: Uint8Array[] }[] => {
  const out: { w: number; frames: Uint8Array[] }[] = [];
  for (let i = 0; i < CHURN_BATCHES; i++) {
    const w = i % WORKERS;
    const st = workerState[w]!;
    const old = st.prompts.shift()!;
    const si = rng.int(systemPrompts.length);
    const hashes = Array.from({ length: PROMPT_BLOCKS - SHARED_BLOCKS }, () => ++st.next);
    st.prompts.push(hashes);
    const tokens = Array.from({ length: (PROMPT_BLOCKS - SHARED_BLOCKS) * BS }, () => rng.int(150_000));
    const events = [
      ...old.map((h) => blockRemoved([h])),
      blockStored({ blockHashes: hashes, parentBlockHash: st.sysTail.get(si) ?? null, tokenIds: tokens, blockSize: BS }),
    ];
    out.push({ w, frames: [new Uint8Array(0), seqFrame(st.seq++), encodeKvEventBatch({ ts: 1.8e9 + rep * CHURN_BATCHES + i, events }, "map")] });
  }
  return out;
};
const churnReps = Array.from({ length: CHURN_WARMUP + CHURN_REPS }, (_, r) => churnRep(r));
const churn = churnReps[CHURN_WARMUP]!; // the decode/hashing split below reads one measured rep's batches
const sets = { unhinted: streams, hinted: reserved.streams };
const selfSizedBefore = streams.filter((s) => s.selfSized).length;
const pass = (set: KvEventStream[], rep: { w: number; frames: Uint8Array[] }[]) => {
  // Collect earlier garbage first (the ingests, the frames): otherwise the concurrent collector's
  // CPU time for it lands in this pass's CPU-seconds.
  Bun.gc(true);
  const t = performance.now();
  const c = cpuMs();
  for (const b of rep) set[b.w]!.message(b.frames);
  return { cpuS: (cpuMs() - c) / 1000, wallS: (performance.now() - t) / 1000 };
};
const warmup = { unhinted: pass(sets.unhinted, churnReps[0]!), hinted: pass(sets.hinted, churnReps[0]!) };
for (let r = 1; r < CHURN_WARMUP; r++) for (const k of ["hinted", "unhinted"] as const) pass(sets[k], churnReps[r]!);
const selfSized = streams.filter((s) => s.selfSized).length;
const repCpuS: { unhinted: number[]; hinted: number[] } = { unhinted: [], hinted: [] };
const repWallS: number[] = [];
for (let r = 0; r < CHURN_REPS; r++) {
  const order = r % 2 === 0 ? (["unhinted", "hinted"] as const) : (["hinted", "unhinted"] as const);
  for (const k of order) {
    const p = pass(sets[k], churnReps[CHURN_WARMUP + r]!);
    repCpuS[k].push(p.cpuS);
    if (k === "unhinted") repWallS.push(p.wallS);
  }
}
if (reserved.index.stats().entries !== index.stats().entries) throw new Error("hinted steady state disagrees");
const churnBlocks = CHURN_BATCHES * (PROMPT_BLOCKS - SHARED_BLOCKS);
const churnEvents = 2 * churnBlocks; // each stored block is matched by one removed block
const churnCpuS = med(repCpuS.unhinted);
const churnHintedCpuS = med(repCpuS.hinted);
const churnS = med(repWallS);

// Where a steady-state batch's CPU goes (issue 25): the fast decoder alone over the same batches,
// then with each store's chain hashing (best of 3 passes, JIT warm); the rest of the hinted line
// is the engine-hash maps and the index.
const ops = new KvOps();
const hashOut = new Uint32Array(2 * PROMPT_BLOCKS);
const bestCpuS = (f: () => void) => {
  let best = Infinity;
  for (let r = 0; r < 3; r++) {
    const c = cpuMs();
    f();
    best = Math.min(best, (cpuMs() - c) / 1000);
  }
  return best;
};
const decodeCpuS = bestCpuS(() => {
  for (const c of churn) if (!readKvOps(c.frames[2]!, ops)) throw new Error("fast path refused a bench batch");
});
const decodeHashCpuS = bestCpuS(() => {
  for (const c of churn) {
    readKvOps(c.frames[2]!, ops);
    for (let e = 0; e < ops.n; e++) {
      if (ops.kind[e] !== OP_STORED) continue;
      const t0 = ops.tStart[e]!;
      chainHashesU32(ops.tokens.subarray(t0, t0 + ops.tCount[e]!), BS, ops.hasParent[e] === 1, 1, 2, null, ops.hCount[e]!, hashOut);
    }
  }
});

// The same steady state over small tables (16 workers × 1,000 blocks: every table fits in a
// core's cache): the gap to the hinted line is what the 1M-block tables' cache and TLB misses cost.
const SMALL_PER = 1_000;
const small = (() => {
  const r = new SeededRng(7);
  const ix = new BlockIndex();
  const kv = new KvIngest(ix, clock);
  const source = { start: () => {}, close: () => {} };
  const toks = (n: number) => Array.from({ length: n * BS }, () => r.int(150_000));
  const ws = Array.from({ length: WORKERS }, (_, w) => ({ stream: kv.addWorker(`s${w}`, source, null, { capacityBlocks: SMALL_PER + 64 }), seq: 0n, next: BigInt(w) << 40n, sys: 0n, prompts: [] as bigint[][] }));
  const frame = (x: (typeof ws)[number], events: KvEvent[], ts: number) => [new Uint8Array(0), seqFrame(x.seq++), encodeKvEventBatch({ ts, events }, "map")];
  const store = (x: (typeof ws)[number]) => {
    const hashes = Array.from({ length: PROMPT_BLOCKS - SHARED_BLOCKS }, () => ++x.next);
    x.prompts.push(hashes);
    return blockStored({ blockHashes: hashes, parentBlockHash: x.sys, tokenIds: toks(PROMPT_BLOCKS - SHARED_BLOCKS), blockSize: BS });
  };
  for (const x of ws) {
    const sys = Array.from({ length: SHARED_BLOCKS }, () => ++x.next);
    x.sys = x.next;
    x.stream.message(frame(x, [blockStored({ blockHashes: sys, parentBlockHash: null, tokenIds: toks(SHARED_BLOCKS), blockSize: BS })], 1));
    while (x.prompts.length * (PROMPT_BLOCKS - SHARED_BLOCKS) < SMALL_PER) x.stream.message(frame(x, [store(x)], 1));
  }
  const passes = Array.from({ length: 3 }, () =>
    Array.from({ length: CHURN_BATCHES }, (_, i) => {
      const x = ws[i % WORKERS]!;
      const events = [...x.prompts.shift()!.map((h) => blockRemoved([h])), store(x)];
      return { x, frames: frame(x, events, 2 + i) };
    }),
  );
  Bun.gc(true);
  let best = Infinity;
  for (const pass of passes) {
    const c = cpuMs();
    for (const b of pass) b.x.stream.message(b.frames);
    best = Math.min(best, (cpuMs() - c) / 1000);
  }
  return { cpuS: best, blocks: ix.stats().entries };
})();

// Index-only apply rate, hashes precomputed (what other nodes and the KV tier feed).
const ix2 = new BlockIndex();
const pre = Array.from({ length: 20_000 }, () => blockHashes(Array.from({ length: PROMPT_BLOCKS * BS }, () => rng.int(150_000)), BS));
const t1 = performance.now();
const c1 = cpuMs();
let applied = 0;
for (let i = 0; i < pre.length; i++) {
  ix2.apply(`w${i % WORKERS}`, { kind: "stored", medium: "gpu", hashes: pre[i]! });
  applied += pre[i]!.length;
}
const applyS = (performance.now() - t1) / 1000;
const applyCpuS = (cpuMs() - c1) / 1000;

// 2. Match: hash the 32k-token prompt, then find matches. Median and best of many runs: on a
// shared machine the best run is the closest to the code's own cost.
const reps = 300;
const tHash: number[] = [];
const tMatch: number[] = [];
const tHashPairs: number[] = [];
const tMatchPairs: number[] = [];
const longPairs = new Uint32Array(2 * LONG_BLOCKS);
let matched = 0;
for (let r = 0; r < reps + 30; r++) {
  const a = performance.now();
  const hs = blockHashes(longDoc, BS);
  const b = performance.now();
  const m = index.findMatches(hs);
  const c = performance.now();
  if (r >= 30) {
    tHash.push(b - a);
    tMatch.push(c - b);
    matched = m.size;
  }
  // The same through the u32-pair API (chainHashesU32 → findMatchesPairs): no BigInt at all.
  const d = performance.now();
  const n = chainHashesU32(longDoc, BS, false, 0, 0, null, Infinity, longPairs);
  const e = performance.now();
  const m2 = index.findMatchesPairs(longPairs, n);
  const f = performance.now();
  if (m2.size !== m.size) throw new Error("findMatchesPairs disagrees with findMatches");
  if (r >= 30) {
    tHashPairs.push(e - d);
    tMatchPairs.push(f - e);
  }
}
const best = (xs: number[]) => Math.min(...xs);
const hsLong = blockHashes(longDoc, BS);
const sample = index.findMatches(hsLong);

const heapDelta = after.heap - before.heap;
console.log("");
const hi = (xs: number[]) => Math.max(...xs);
const mid = (xs: number[]) => [...xs].sort((x, y) => x - y)[xs.length >> 1]!;
const line = (name: string, r: { wallS: number; cpuS: number; chunkRates: number[]; chunkCpuRates: number[]; faults: number }) =>
  console.log(`  ${name}: ${fmt(totalBlocks / r.wallS)} blocks/s wall, ${fmt(totalBlocks / r.cpuS)} per CPU-second; per 50k-block chunk median ${fmt(mid(r.chunkCpuRates))} per CPU-s (best ${fmt(hi(r.chunkCpuRates))}); ${fmt(r.faults)} minor page faults`);
console.log(`ingest (decode + hash + map + index), ${fmt(totalBlocks)} stored blocks from an empty index   [target ≥ 1,000,000 per s]`);
line("cold (first run: JIT warm-up, tables growing)", cold);
line("warm (same frames, fresh index and streams) ", warm);
line("warm, capacity hints (KvIngest.addWorker)   ", reserved);
console.log(`  first touch of fresh memory here: ${fmt(ft.firstMsPerMiB, 2)} ms CPU per MiB (rewriting it: ${fmt(ft.againMsPerMiB, 2)} ms); the tables end at ${fmt((st.bytes! + mapBytes) / 2 ** 20, 1)} MiB and growing by 1.5× allocates ~3× that`);
// Table loads from their bytes: 20-byte slots in both (5 u32 words: key + herd hash + media; key +
// one bitset word per medium for ≤ 32 workers), so this also runs on older trees for A/B.
const loads = (ix: BlockIndex, ss: KvEventStream[]) => {
  const m = ss.map((s) => s.blocks.size / (s.blocks.bytes() / 20)).sort((a, b) => a - b);
  return `worker maps at ${fmt(100 * m[0]!)}–${fmt(100 * m[m.length - 1]!)} % load, index ${fmt((100 * ix.size()) / (ix.stats().bytes! / 20))} %`;
};
const rates = (xs: number[]) => xs.map((c) => fmt(churnEvents / c)).join(", ");
console.log(`steady state at capacity (each batch evicts a prompt, one BlockRemoved per block, and stores one), block events (stored + removed) per CPU-second, ${CHURN_REPS} reps of ${fmt(churnEvents)} events after ${CHURN_WARMUP} warm-up reps into both, order alternating   [target ≥ 2,000,000, issue 25]`);
console.log(`  unhinted (no capacity known: tables grown, self-sized at the first eviction; ${selfSized - selfSizedBefore} of ${WORKERS} workers self-sized in the warm-up): median ${fmt(churnEvents / churnCpuS)} per CPU-s (reps ${rates(repCpuS.unhinted)}); ${fmt(churnEvents / churnS)} events/s wall; first warm-up rep ${fmt(churnEvents / warmup.unhinted.cpuS)}; ${loads(index, streams)}`);
console.log(`  capacity-hinted (tables sized up front: the daemon's configuration when the engine states its capacity — sim, vLLM, SGLang): median ${fmt(churnEvents / churnHintedCpuS)} per CPU-s (reps ${rates(repCpuS.hinted)}); first warm-up rep (JIT warm from the line above) ${fmt(churnEvents / warmup.hinted.cpuS)}; ${loads(reserved.index, reserved.streams)}`);
const nsPerEvent = (cpuS: number) => fmt((cpuS * 1e9) / churnEvents);
console.log(`  per block event (hinted, median rep): ${nsPerEvent(churnHintedCpuS)} ns = decode ${nsPerEvent(decodeCpuS)} + chain hashing ${nsPerEvent(decodeHashCpuS - decodeCpuS)} + engine-hash maps and index ${nsPerEvent(churnHintedCpuS - decodeHashCpuS)} (decode and hashing: best of 3 passes over the same batches)`);
console.log(`  the same steady state over small tables (${fmt(small.blocks)} blocks in all, every table in cache; best of 3 passes): ${fmt(churnEvents / small.cpuS)} block events per CPU-second = ${nsPerEvent(small.cpuS)} ns per event`);
console.log(`index apply only (precomputed hashes): ${fmt(applied / applyS)} blocks/s wall, ${fmt(applied / applyCpuS)} per CPU-second`);
console.log(`indexed: ${fmt(st.blocks)} distinct blocks, ${fmt(st.entries)} (worker, block) residencies, ${fmt(mapped)} engine-hash mappings`);
console.log(`match, 2,000-block prompt over ${WORKERS} workers: findMatches median ${fmt(med(tMatch) * 1000, 1)} µs, best ${fmt(best(tMatch) * 1000, 1)} µs   [target ≤ 100 µs]; hashing the 32k tokens median ${fmt(med(tHash) * 1000, 1)} µs, best ${fmt(best(tHash) * 1000, 1)} µs; ${matched} workers matched, deepest ${Math.max(...[...sample.values()].map((o) => o.gpu))} blocks`);
console.log(`  u32-pair API (chainHashesU32 + findMatchesPairs): match median ${fmt(med(tMatchPairs) * 1000, 1)} µs, best ${fmt(best(tMatchPairs) * 1000, 1)} µs; hashing median ${fmt(med(tHashPairs) * 1000, 1)} µs, best ${fmt(best(tHashPairs) * 1000, 1)} µs`);
console.log(`memory (heapUsed after - before, GC'd; includes typed arrays): ${fmt(heapDelta / 1e6, 1)} MB = ${fmt(heapDelta / st.entries, 1)} B per indexed block (residency), ${fmt(heapDelta / st.blocks, 1)} B per distinct block   [target ≤ 100]`);
console.log(`  of which typed arrays: index ${fmt(st.bytes! / 1e6, 1)} MB, engine-hash maps ${fmt(mapBytes / 1e6, 1)} MB; rss delta ${fmt((after.rss - before.rss) / 1e6, 1)} MB`);
