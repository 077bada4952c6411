// The engines' side of bench/kv-ingest-daemon.ts, in a process of its own so its CPU is not the
// measured process's: one ZMTP PUB per engine worker (herd's own PubSocket, high-water marks set so
// nothing is dropped: TCP backpressure paces it), every batch encoded before anything is sent.
// Protocol on stdio: prints `{"endpoints": [...]}`; once every PUB has a subscriber, publishes the
// fill (stores up to ~capacity) and prints `filled`; each `go` publishes the next KVP_BATCHES
// steady-state batches per worker (each 28 BlockRemoved of the oldest prompt + one 28-block
// BlockStored, as vLLM at capacity), KVP_CHUNKS times at most, and prints `sent`.
// Env: KVP_WORKERS, KVP_BLOCKS_PER_WORKER, KVP_BATCHES (per worker and chunk), KVP_CHUNKS (2).
import { SeededRng } from "../../src/core/rng.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";
import { PubSocket } from "../../src/transport/zmtp/index.ts";

const W = Number(process.env.KVP_WORKERS ?? 16);
const PER = Number(process.env.KVP_BLOCKS_PER_WORKER ?? 61_000);
const N = Number(process.env.KVP_BATCHES ?? 1000);
const CHUNKS = Number(process.env.KVP_CHUNKS ?? 2);
const BS = 16;
const PB = 28;
const rng = new SeededRng(1);
const toks = (n: number) => Array.from({ length: n * BS }, () => rng.int(150_000));
const topic = new Uint8Array(0);

interface Eng {
  seq: bigint;
  next: bigint;
  sys: bigint;
  prompts: bigint[][];
  fill: Uint8Array[][];
  steady: Uint8Array[][];
}
const frame = (e: Eng, events: unknown[], ts: number) => [topic, seqFrame(e.seq++), encodeKvEventBatch({ ts, events: events as never }, "map")];
const engines: Eng[] = Array.from({ length: W }, (_, w) => ({ seq: 0n, next: BigInt(w + 1) << 40n, sys: 0n, prompts: [], fill: [], steady: [] }));
const store = (e: Eng) => {
  const hashes = Array.from({ length: PB }, () => ++e.next);
  e.prompts.push(hashes);
  return blockStored({ blockHashes: hashes, parentBlockHash: e.sys, tokenIds: toks(PB), blockSize: BS });
};
for (const e of engines) {
  const sys = Array.from({ length: 4 }, () => ++e.next);
  e.sys = e.next;
  e.fill.push(frame(e, [blockStored({ blockHashes: sys, parentBlockHash: null, tokenIds: toks(4), blockSize: BS })], 1));
  while (e.prompts.length * PB < PER) e.fill.push(frame(e, [store(e)], 1));
  for (let i = 0; i < N * CHUNKS; i++) e.steady.push(frame(e, [...e.prompts.shift()!.map((h) => blockRemoved([h])), store(e)], 2 + i));
}

const pubs = engines.map(() => new PubSocket({ sndHwm: 1 << 30, sndHwmBytes: 2 ** 40 }));
const endpoints = pubs.map((p) => p.bind("tcp://127.0.0.1:0"));
console.log(JSON.stringify({ endpoints }));
while (pubs.some((p) => p.subscribers === 0)) await Bun.sleep(10);
await Bun.sleep(200); // their SUBSCRIBE commands follow the handshake

/** Round-robin over the engines, as their batches would interleave on a node. */
function publish(which: "fill" | "steady", from = 0, to = Infinity): void {
  const longest = Math.min(to, Math.max(...engines.map((e) => e[which].length)));
  for (let i = from; i < longest; i++) {
    for (let w = 0; w < W; w++) {
      const f = engines[w]![which][i];
      if (f && pubs[w]!.send(f) !== 1) throw new Error(`publisher ${w}: batch ${i} not queued`);
    }
  }
}
publish("fill");
console.log("filled");
let chunk = 0;
for await (const line of console) {
  if (line.trim() === "go" && chunk < CHUNKS) {
    publish("steady", chunk * N, (chunk + 1) * N);
    chunk++;
    console.log("sent");
  } else if (line.trim() === "quit") break;
}
for (const p of pubs) p.close();
process.exit(0);
