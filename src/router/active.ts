// Active KV blocks per worker from herd's own bookings (Dynamo's ActiveSequences, routers.md §1.3):
// the decode term of the KV-aware cost. A prompt's full blocks are counted by sequence hash with a
// reference count, so a prefix shared by several in-flight requests on one worker counts once
// (Dynamo's "assume KV reuse"); its partial last block, and requests booked without hashes, count
// as `estimated` blocks of their own. Added at dispatch, removed when the request ends.
// A second BlockIndex answers "how many of this prompt's leading blocks are already active on each
// worker" in one pass, which gives the blocks a request would add (`newBlocks` in cost.ts).
import { BlockIndex } from "../kv/block-index.ts";

interface WorkerActive {
  refs: Map<bigint, number>;
  estimated: number;
}

export class ActiveBlocks {
  private readonly index = new BlockIndex();
  private readonly workers = new Map<string, WorkerActive>();

  add(worker: string, hashes: readonly bigint[], estimatedBlocks: number): void {
    let w = this.workers.get(worker);
    if (!w) this.workers.set(worker, (w = { refs: new Map(), estimated: 0 }));
    w.estimated += estimatedBlocks;
    const fresh: bigint[] = [];
    for (const h of hashes) {
      const n = w.refs.get(h) ?? 0;
      w.refs.set(h, n + 1);
      if (n === 0) fresh.push(h);
    }
    if (fresh.length > 0) this.index.apply(worker, { kind: "stored", medium: "gpu", hashes: fresh });
  }

  remove(worker: string, hashes: readonly bigint[], estimatedBlocks: number): void {
    const w = this.workers.get(worker);
    if (!w) return;
    w.estimated = Math.max(0, w.estimated - estimatedBlocks);
    const gone: bigint[] = [];
    for (const h of hashes) {
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

  /** Distinct hashed blocks plus estimated blocks active on a worker. */
  blocks(worker: string): number {
    const w = this.workers.get(worker);
    return w ? w.refs.size + w.estimated : 0;
  }

  /** Leading blocks of `hashes` already active on each worker (workers with none absent). */
  overlaps(hashes: readonly bigint[]): Map<string, number> {
    const out = new Map<string, number>();
    if (hashes.length === 0 || this.index.size() === 0) return out;
    for (const [worker, o] of this.index.findMatches(hashes)) if (o.gpu > 0) out.set(worker, o.gpu);
    return out;
  }
}
