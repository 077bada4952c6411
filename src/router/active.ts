// Active KV blocks per worker from herd's own bookings (Dynamo's ActiveSequences, docs/references.md#routers-1.3):
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
//
// Released keys stay in the map at count 0 (and are reused by the next booking of the same prefix)
// until they outnumber the live ones by PRUNE_SLACK: a 32k-token prompt books ~300 keys, and
// deleting them all at release only to insert them again at the next booking made the map shrink
// and regrow (rehash, allocation) on every request.
import { blocksCovered, trackedKeys, trackedWeight } from "./sampling.ts";

/** Count-0 keys kept per worker beyond its live ones before they are swept. */
const PRUNE_SLACK = 4096;

interface WorkerActive {
  /** Tracked key → requests holding it; 0 = none (kept for reuse, see the header). */
  refs: Map<number, number>;
  /** Entries of `refs` at count 0. */
  zeros: number;
  /** Blocks stood for by the distinct tracked hashes. */
  tracked: number;
  estimated: number;
}

export class ActiveBlocks {
  private readonly workers = new Map<string, WorkerActive>();

  /** The keys tracked for a prompt (shared: do not modify), and how many of its blocks they stand for. */
  track(hashes: readonly bigint[]): { tracked: readonly number[]; covered: number } {
    const tracked = trackedKeys(hashes);
    return { tracked, covered: blocksCovered(tracked.length) };
  }

  /** Book a prompt: `tracked` from track(), `estimated` = its blocks not covered by them. */
  add(worker: string, tracked: readonly number[], estimated: number): void {
    let w = this.workers.get(worker);
    if (!w) this.workers.set(worker, (w = { refs: new Map(), zeros: 0, tracked: 0, estimated: 0 }));
    w.estimated += estimated;
    const refs = w.refs;
    for (let i = 0; i < tracked.length; i++) {
      const k = tracked[i]!;
      const n = refs.get(k);
      if (n === undefined) {
        refs.set(k, 1);
        w.tracked += trackedWeight(i);
      } else {
        if (n === 0) {
          w.zeros--;
          w.tracked += trackedWeight(i);
        }
        refs.set(k, n + 1);
      }
    }
  }

  remove(worker: string, tracked: readonly number[], estimated: number): void {
    const w = this.workers.get(worker);
    if (!w) return;
    w.estimated = Math.max(0, w.estimated - estimated);
    const refs = w.refs;
    for (let i = 0; i < tracked.length; i++) {
      const k = tracked[i]!;
      const n = refs.get(k);
      if (n === undefined || n === 0) continue;
      if (n === 1) {
        refs.set(k, 0);
        w.zeros++;
        w.tracked -= trackedWeight(i);
      } else refs.set(k, n - 1);
    }
    if (w.zeros > refs.size - w.zeros + PRUNE_SLACK) {
      for (const [k, n] of refs) if (n === 0) refs.delete(k);
      w.zeros = 0;
    }
    if (refs.size === w.zeros && w.estimated === 0 && w.zeros === 0) this.workers.delete(worker);
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
    const keys = trackedKeys(hashes);
    for (const [worker, w] of this.workers) {
      if (w.refs.size === w.zeros) continue; // nothing live on this worker
      const refs = w.refs;
      let lo = 0;
      let hi = keys.length;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if ((refs.get(keys[mid - 1]!) ?? 0) > 0) lo = mid;
        else hi = mid - 1;
      }
      if (lo > 0) out.set(worker, blocksCovered(lo));
    }
    return out;
  }
}
