// Active KV blocks per worker from herd's own bookings (Dynamo's ActiveSequences, routers.md §1.3):
// the decode term of the KV-aware cost. Blocks are counted by sequence hash with a reference
// count, so a prefix shared by several in-flight requests on one worker counts once (Dynamo's
// "assume KV reuse"). Added at dispatch, removed when the request ends.
//
// Only the tracked hashes (sampling.ts: all of a prompt's first 64 blocks, then every 8th) are
// kept, as number keys; each stands for the blocks since the previous tracked one. The blocks
// after the last tracked one, the partial last block, and requests booked without hashes count as
// `estimated` blocks of their own, so sharing beyond block 64 is seen at 8-block granularity.
// Reference counts never increase with depth along a prompt (a request holding block i holds
// 0..i-1), so "how many of this prompt's leading blocks are already active on a worker" is a
// binary search (`newBlocks` in cost.ts).
import { blocksCovered, mapKey, trackedHashes, trackedWeight } from "./sampling.ts";

interface WorkerActive {
  refs: Map<number, number>;
  /** Blocks stood for by the distinct tracked hashes. */
  tracked: number;
  estimated: number;
}

export class ActiveBlocks {
  private readonly workers = new Map<string, WorkerActive>();

  /** The keys tracked for a prompt, and how many of its blocks they stand for. */
  track(hashes: readonly bigint[]): { tracked: number[]; covered: number } {
    const tracked = trackedHashes(hashes).map(mapKey);
    return { tracked, covered: blocksCovered(tracked.length) };
  }

  /** Book a prompt: `tracked` from track(), `estimated` = its blocks not covered by them. */
  add(worker: string, tracked: readonly number[], estimated: number): void {
    let w = this.workers.get(worker);
    if (!w) this.workers.set(worker, (w = { refs: new Map(), tracked: 0, estimated: 0 }));
    w.estimated += estimated;
    for (let i = 0; i < tracked.length; i++) {
      const n = w.refs.get(tracked[i]!) ?? 0;
      w.refs.set(tracked[i]!, n + 1);
      if (n === 0) w.tracked += trackedWeight(i);
    }
  }

  remove(worker: string, tracked: readonly number[], estimated: number): void {
    const w = this.workers.get(worker);
    if (!w) return;
    w.estimated = Math.max(0, w.estimated - estimated);
    for (let i = 0; i < tracked.length; i++) {
      const n = w.refs.get(tracked[i]!);
      if (n === undefined) continue;
      if (n <= 1) {
        w.refs.delete(tracked[i]!);
        w.tracked -= trackedWeight(i);
      } else w.refs.set(tracked[i]!, n - 1);
    }
    if (w.refs.size === 0 && w.estimated === 0) this.workers.delete(worker);
  }

  /** Distinct blocks plus estimated blocks active on a worker. */
  blocks(worker: string): number {
    const w = this.workers.get(worker);
    return w ? w.tracked + w.estimated : 0;
  }

  /** Leading blocks of a prompt already active on each worker (absent = none). */
  overlaps(hashes: readonly bigint[]): Map<string, number> {
    const out = new Map<string, number>();
    if (hashes.length === 0 || this.workers.size === 0) return out;
    const keys = trackedHashes(hashes).map(mapKey);
    for (const [worker, w] of this.workers) {
      let lo = 0;
      let hi = keys.length;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if (w.refs.has(keys[mid - 1]!)) lo = mid;
        else hi = mid - 1;
      }
      if (lo > 0) out.set(worker, blocksCovered(lo));
    }
    return out;
  }
}
