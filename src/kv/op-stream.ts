// The index ops an ingest thread sends the main thread: one Uint32Array per flush, transferred
// (not copied) with postMessage, records back to back in the order the thread made them:
//   [stream, op, medium, n, lo_0, hi_0, … lo_{n-1}, hi_{n-1}]   op: 0 stored, 1 removed, 2 cleared
// `stream` is the main thread's id for one addWorker (a re-added worker gets a new one), so ops
// of a stream that was removed meanwhile are dropped on arrival (threaded-ingest.ts).
import type { WorkerIndexSink } from "./index-sink.ts";
import { MEDIA, MEDIUM_INDEX, type Medium } from "./indexer.ts";

export const OP_STORED = 0;
export const OP_REMOVED = 1;
export const OP_CLEARED = 2;
const HEADER = 4;

/** The thread's side: every stream's sink writes into one growing buffer until take(). */
export class OpWriter {
  /** `onWrite`: called after each record (the thread schedules its flush from it). */
  constructor(private readonly onWrite: () => void = () => {}) {}

  private buf = new Uint32Array(16_384);
  private len = 0;
  /** Blocks (store and removal hashes) written since the last take(). */
  blocks = 0;

  sink(stream: number): WorkerIndexSink {
    return {
      stored: (medium, pairs, n) => this.put(stream, OP_STORED, medium, pairs, n),
      removed: (medium, pairs, n) => this.put(stream, OP_REMOVED, medium, pairs, n),
      cleared: () => this.put(stream, OP_CLEARED, "gpu", null, 0),
    };
  }

  get words(): number {
    return this.len;
  }

  private put(stream: number, op: number, medium: Medium, pairs: Uint32Array | null, n: number): void {
    if (op !== OP_CLEARED && n === 0) return;
    const need = this.len + HEADER + 2 * n;
    if (need > this.buf.length) {
      const grown = new Uint32Array(Math.max(need, 2 * this.buf.length));
      grown.set(this.buf.subarray(0, this.len));
      this.buf = grown;
    }
    const b = this.buf;
    let at = this.len;
    b[at++] = stream;
    b[at++] = op;
    b[at++] = MEDIUM_INDEX[medium];
    b[at++] = n;
    if (pairs) b.set(pairs.subarray(0, 2 * n), at);
    this.len = at + 2 * n;
    this.blocks += n;
    this.onWrite();
  }

  /** The records written so far (a fresh buffer, exactly sized, safe to transfer), or null. */
  take(): Uint32Array | null {
    if (this.len === 0) return null;
    const out = this.buf.slice(0, this.len);
    this.len = 0;
    this.blocks = 0;
    return out;
  }
}

/** Where a stream's ops go on the main thread; null = the stream is gone (ops dropped). */
export type SinkOf = (stream: number) => WorkerIndexSink | null;

/**
 * The main thread's side: apply one buffer's records in order. Throws on a malformed buffer
 * (a bug: the thread wrote it) after applying the records before it; returns the blocks applied.
 */
export function applyOps(words: Uint32Array, sinkOf: SinkOf): number {
  let at = 0;
  let blocks = 0;
  while (at < words.length) {
    if (at + HEADER > words.length) throw new Error(`kv op stream: truncated record at word ${at}`);
    const stream = words[at]!;
    const op = words[at + 1]!;
    const medium = MEDIA[words[at + 2]!];
    const n = words[at + 3]!;
    const end = at + HEADER + 2 * n;
    if (medium === undefined || op > OP_CLEARED || end > words.length) throw new Error(`kv op stream: bad record at word ${at}`);
    const sink = sinkOf(stream);
    if (sink) {
      if (op === OP_CLEARED) sink.cleared();
      else {
        const pairs = words.subarray(at + HEADER, end);
        if (op === OP_STORED) sink.stored(medium, pairs, n);
        else sink.removed(medium, pairs, n);
        blocks += n;
      }
    }
    at = end;
  }
  return blocks;
}
