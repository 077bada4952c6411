// Active KV blocks per worker from herd's own bookings (Dynamo's ActiveSequences, routers.md §1.3):
// the decode term of the KV-aware cost. Blocks are counted by sequence hash with a reference
// count, so a prefix shared by several in-flight requests on one worker counts once (Dynamo's
// "assume KV reuse"). Added at dispatch, removed when the request ends.
//
// Only the tracked hashes (sampling.ts: all of a prompt's first 64 blocks, then every 8th) are
// kept; each stands for the blocks since the previous tracked one. The blocks after the last
// tracked one, the partial last block, and requests booked without hashes count as `estimated`
// blocks of their own, so sharing beyond block 64 is seen at 8-block granularity.
// A BlockIndex over the tracked hashes answers "how many of this prompt's leading blocks are
// already active on each worker" in one pass (`newBlocks` in cost.ts).
import { BlockIndex } from "../kv/block-index.ts";
import { blocksCovered, trackedHashes, trackedWeight } from "./sampling.ts";

interface WorkerActive {
  refs: Map<bigint, number>;
  /** Blocks stood for by the distinct tracked hashes. */
  tracked: number;
  estimated: number;
}

export class ActiveBlocks {
  private readonly index = new BlockIndex(1 << 14);
  private readonly workers = new Map<string, WorkerActive>();

  /** The hashes tracked for a prompt, and how many of its blocks they stand for. */
  track(hashes: readonly bigint[]): { tracked: bigint[]; covered: number } {
    const tracked = trackedHashes(hashes);
    return { tracked, covered: blocksCovered(tracked.length) };
  }

  /** Book a prompt: `tracked` from track(), `estimated` = its blocks not covered by them. */
  add(worker: string, tracked: readonly bigint[], estimated: number): void {
    let w = this.workers.get(worker);
    if (!w) this.workers.set(worker, (w = { refs: new Map(), tracked: 0, estimated: 0 }));
    w.estimated += estimated;
    const fresh: bigint[] = [];
    for (let i = 0; i < tracked.length; i++) {
      const h = tracked[i]!;
      const n = w.refs.get(h) ?? 0;
      w.refs.set(h, n + 1);
      if (n === 0) {
        fresh.push(h);
        w.tracked += trackedWeight(i);
      }
    }
    if (fresh.length > 0) this.index.apply(worker, { kind: "stored", medium: "gpu", hashes: fresh });
  }

  remove(worker: string, tracked: readonly bigint[], estimated: number): void {
    const w = this.workers.get(worker);
    if (!w) return;
    w.estimated = Math.max(0, w.estimated - estimated);
    const gone: bigint[] = [];
    for (let i = 0; i < tracked.length; i++) {
      const h = tracked[i]!;
      const n = w.refs.get(h);
      if (n === undefined) continue;
      if (n <= 1) {
        w.refs.delete(h);
        gone.push(h);
        w.tracked -= trackedWeight(i);
      } else w.refs.set(h, n - 1);
    }
    // The worker's entry stays when it goes idle: BlockIndex.removeWorker scans the whole table.
    if (gone.length > 0) this.index.apply(worker, { kind: "removed", medium: "gpu", hashes: gone });
  }

  /** Distinct blocks plus estimated blocks active on a worker. */
  blocks(worker: string): number {
    const w = this.workers.get(worker);
    return w ? w.tracked + w.estimated : 0;
  }

  /** Leading blocks of a prompt already active on each worker (absent = none). */
  overlaps(hashes: readonly bigint[]): Map<string, number> {
    const out = new Map<string, number>();
    if (hashes.length === 0 || this.index.size() === 0) return out;
    for (const [worker, o] of this.index.findMatches(trackedHashes(hashes))) if (o.gpu > 0) out.set(worker, blocksCovered(o.gpu));
    return out;
  }
}
