// Worker-thread side of bench/kv-ingest-threads.ts: one ingest shard (a KvIngest and its own
// BlockIndex) owning some engine workers. "build" fills them to capacity and pre-encodes the
// steady-state batches (untimed); "run" applies the batches and reports its wall time.
import { VirtualClock } from "../../src/core/clock.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { BlockIndex } from "../../src/kv/block-index.ts";
import { KvIngest } from "../../src/kv/ingest-manager.ts";
import type { KvEventStream } from "../../src/kv/ingest.ts";
import { blockRemoved, blockStored, encodeKvEventBatch } from "../../src/protocol/kv-encode.ts";
import type { KvEvent } from "../../src/protocol/kv-events.ts";
import { seqFrame } from "../../src/protocol/kv-frames.ts";

declare const self: Worker;

export interface BuildMessage {
  kind: "build";
  /** Engine worker numbers this shard owns (their ids and hash ranges are global). */
  workers: number[];
  blocksPerWorker: number;
  batchesPerWorker: number;
  blockSize: number;
}

const PROMPT = 28; // blocks per stored prompt (512-token prompts after a 4-block system prompt)
const SYS = 4;

let run: (() => void) | null = null;
let entries = () => 0;

self.onmessage = (m: MessageEvent<BuildMessage | { kind: "run" }>) => {
  const msg = m.data;
  if (msg.kind === "build") {
    const { workers, blocksPerWorker, batchesPerWorker, blockSize: bs } = msg;
    const index = new BlockIndex();
    const kv = new KvIngest(index, new VirtualClock());
    const source = { start: () => {}, close: () => {} };
    const churn: { stream: KvEventStream; frames: Uint8Array[] }[] = [];
    const perWorker = workers.map((w) => {
      const rng = new SeededRng(1000 + w);
      const toks = (n: number) => Array.from({ length: n * bs }, () => rng.int(150_000));
      const stream = kv.addWorker(`w${w}`, source, null, { capacityBlocks: blocksPerWorker + SYS });
      let seq = 0n;
      let next = BigInt(w) << 40n;
      const prompts: bigint[][] = [];
      const frame = (events: KvEvent[], ts: number) => [new Uint8Array(0), seqFrame(seq++), encodeKvEventBatch({ ts, events }, "map")];
      const sysHashes = Array.from({ length: SYS }, () => ++next);
      const sysTail = next;
      const store = () => {
        const hashes = Array.from({ length: PROMPT }, () => ++next);
        prompts.push(hashes);
        return blockStored({ blockHashes: hashes, parentBlockHash: sysTail, tokenIds: toks(PROMPT), blockSize: bs });
      };
      stream.message(frame([blockStored({ blockHashes: sysHashes, parentBlockHash: null, tokenIds: toks(SYS), blockSize: bs })], 1));
      while (prompts.length * PROMPT < blocksPerWorker) stream.message(frame([store()], 1));
      return { stream, frame, store, prompts };
    });
    // Steady state: each batch evicts the worker's oldest prompt (one BlockRemoved per block) and
    // stores a new one; workers interleaved as their events would arrive.
    for (let i = 0; i < batchesPerWorker; i++) {
      for (const x of perWorker) {
        const events: KvEvent[] = [...x.prompts.shift()!.map((h) => blockRemoved([h])), x.store()];
        churn.push({ stream: x.stream, frames: x.frame(events, 2 + i) });
      }
    }
    run = () => {
      for (const c of churn) c.stream.message(c.frames);
    };
    entries = () => index.stats().entries;
    Bun.gc(true);
    self.postMessage({ kind: "ready" });
  } else if (msg.kind === "run" && run) {
    const t0 = performance.now();
    run();
    self.postMessage({ kind: "done", wallMs: performance.now() - t0, entries: entries() });
  }
};
