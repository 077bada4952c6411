// Active KV blocks per worker from herd's own bookings (Dynamo's ActiveSequences, routers.md §1.3):
// the decode term of the KV-aware cost. Blocks are counted by sequence hash with a reference
// count, so a prefix shared by several in-flight requests on one worker counts once (Dynamo's
// "assume KV reuse"). Added at dispatch, removed when the request ends.
//
// Only every `stride`-th block's hash is tracked (Dynamo's --router-active-sequence-stride): a
// 32k-token prompt is 2,000 blocks, and booking and releasing each of them costs milliseconds of
// event loop. A tracked hash stands for the `stride` blocks ending at it (its hash names the whole
// prefix); the blocks after the last tracked one, the partial last block, and requests booked
// without hashes count as `estimated` blocks of their own. Sharing is therefore seen at stride
// granularity: at most stride − 1 shared blocks per request are counted twice.
// A BlockIndex over the tracked hashes answers "how many of this prompt's leading blocks are
// already active on each worker" in one pass (`newBlocks` in cost.ts).
import { BlockIndex } from "../kv/block-index.ts";

interface WorkerActive {
  refs: Map<bigint, number>;
  estimated: number;
}

export const ACTIVE_STRIDE = 8;

export class ActiveBlocks {
  private readonly index = new BlockIndex();
  private readonly workers = new Map<string, WorkerActive>();

  constructor(readonly stride = ACTIVE_STRIDE) {}

  /** The hashes tracked for a prompt: blocks stride−1, 2·stride−1, … */
  sample(hashes: readonly bigint[]): bigint[] {
    const out: bigint[] = [];
    for (let i = this.stride - 1; i < hashes.length; i += this.stride) out.push(hashes[i]!);
    return out;
  }

  /** Book a prompt: `sampled` from sample(), `estimated` = its blocks not covered by them. */
  add(worker: string, sampled: readonly bigint[], estimated: number): void {
    let w = this.workers.get(worker);
    if (!w) this.workers.set(worker, (w = { refs: new Map(), estimated: 0 }));
    w.estimated += estimated;
    const fresh: bigint[] = [];
    for (const h of sampled) {
      const n = w.refs.get(h) ?? 0;
      w.refs.set(h, n + 1);
      if (n === 0) fresh.push(h);
    }
    if (fresh.length > 0) this.index.apply(worker, { kind: "stored", medium: "gpu", hashes: fresh });
  }

  remove(worker: string, sampled: readonly bigint[], estimated: number): void {
    const w = this.workers.get(worker);
    if (!w) return;
    w.estimated = Math.max(0, w.estimated - estimated);
    const gone: bigint[] = [];
    for (const h of sampled) {
      const n = w.refs.get(h);
      if (n === undefined) continue;
      if (n <= 1) {
        w.refs.delete(h);
        gone.push(h);
      } else w.refs.set(h, n - 1);
    }
    // The worker's entry stays when it goes idle: BlockIndex.removeWorker scans the whole table.
    if (gone.length > 0) this.index.apply(worker, { kind: "removed", medium: "gpu", hashes: gone });
  }

  /** Distinct blocks (tracked × stride) plus estimated blocks active on a worker. */
  blocks(worker: string): number {
    const w = this.workers.get(worker);
    return w ? w.refs.size * this.stride + w.estimated : 0;
  }

  /** Leading blocks of a prompt already active on each worker, to stride granularity (absent = none). */
  overlaps(hashes: readonly bigint[]): Map<string, number> {
    const out = new Map<string, number>();
    if (hashes.length < this.stride || this.index.size() === 0) return out;
    for (const [worker, o] of this.index.findMatches(this.sample(hashes))) if (o.gpu > 0) out.set(worker, o.gpu * this.stride);
    return out;
  }
}
