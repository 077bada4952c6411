// What the router itself sent where: the `prefix` policy's stand-in for engine KV events, and the
// `kv` policy's short-lived "predicted" entries that cover the gap between a decision and the
// engine's BlockStored events (Dynamo's predict-on-route, llm-d's speculative indexing;
// routers.md §1.7, §8 lesson 5).
//
// Bounded twice: a block counts only for `ttlMs` after the last request that sent it, and each
// worker remembers at most `maxBlocksPerWorker` tracked hashes (sampling.ts: every block of a
// prompt's first 64, then every 8th), least recently sent forgotten first (a Map in recency order). Expiries are rounded up to 1/64 of the TTL, so re-sending a prefix within the
// same slice costs a binary search instead of touching each of its (up to 2,000) blocks.
//
// Lookup walks the shared BlockIndex (one pass over the prompt for every worker), then trims each
// worker's run to its unexpired part with a binary search. That is exact because along one prompt
// the expiry never increases with depth: block i's sequence hash names the whole prefix up to i, so
// every request that sent block i also sent blocks 0..i-1, at the same moment.
import { BlockIndex } from "../kv/block-index.ts";
import { blocksCovered, trackedHashes } from "./sampling.ts";

export class PrefixMemory {
  private readonly index = new BlockIndex(1 << 14);
  /** Per worker: block hash → expiry (ms), oldest first. */
  private readonly workers = new Map<string, Map<bigint, number>>();
  private readonly sliceMs: number;

  constructor(
    readonly ttlMs: number,
    readonly maxBlocksPerWorker: number,
  ) {
    this.sliceMs = Math.max(1, Math.ceil(ttlMs / 64));
  }

  /** Remember that `hashes` (a prompt's leading blocks) were sent to `worker` at `nowMs`. */
  record(worker: string, prompt: readonly bigint[], nowMs: number): void {
    if (prompt.length === 0 || this.ttlMs <= 0) return;
    const hashes = trackedHashes(prompt);
    let m = this.workers.get(worker);
    if (!m) this.workers.set(worker, (m = new Map()));
    const expiry = Math.ceil((nowMs + this.ttlMs) / this.sliceMs) * this.sliceMs;
    // Only the first `maxBlocksPerWorker` blocks: a longer prompt would evict its own head and
    // leave a suffix no lookup can reach.
    const n = Math.min(hashes.length, this.maxBlocksPerWorker);
    // Blocks [0, from) already carry this expiry (monotone along the prompt): leave them be.
    let lo = 0;
    let hi = n;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (m.get(hashes[mid]!) === expiry) lo = mid + 1;
      else hi = mid;
    }
    const from = lo;
    // Deepest first, so the head ends most recent and a prompt's tail is forgotten before its
    // head (the prefix stays walkable).
    const fresh: bigint[] = [];
    for (let i = n - 1; i >= from; i--) {
      const h = hashes[i]!;
      if (m.delete(h)) m.set(h, expiry);
      else {
        m.set(h, expiry);
        fresh.push(h);
      }
    }
    if (fresh.length > 0) this.index.apply(worker, { kind: "stored", medium: "gpu", hashes: fresh });
    this.evict(worker, m, nowMs);
  }

  /** Leading blocks of `hashes` each worker is remembered to hold at `nowMs` (workers with none absent). */
  overlaps(prompt: readonly bigint[], nowMs: number): Map<string, number> {
    const out = new Map<string, number>();
    if (prompt.length === 0 || this.workers.size === 0) return out;
    const hashes = trackedHashes(prompt);
    for (const [worker, o] of this.index.findMatches(hashes)) {
      const m = this.workers.get(worker);
      if (!m || o.gpu === 0) continue;
      // Largest n ≤ o.gpu with hashes[n-1] unexpired (expiry is non-increasing along the prompt).
      let lo = 0;
      let hi = o.gpu;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if ((m.get(hashes[mid - 1]!) ?? 0) > nowMs) lo = mid;
        else hi = mid - 1;
      }
      if (lo > 0) out.set(worker, blocksCovered(lo));
    }
    return out;
  }

  /** Tracked hashes remembered for a worker (expired ones included until evicted). */
  size(worker: string): number {
    return this.workers.get(worker)?.size ?? 0;
  }

  forget(worker: string): void {
    this.workers.delete(worker);
    this.index.removeWorker(worker);
  }

  private evict(worker: string, m: Map<bigint, number>, nowMs: number): void {
    const gone: bigint[] = [];
    for (const [h, exp] of m) {
      if (m.size - gone.length <= this.maxBlocksPerWorker && exp > nowMs) break;
      gone.push(h);
    }
    if (gone.length === 0) return;
    for (const h of gone) m.delete(h);
    this.index.apply(worker, { kind: "removed", medium: "gpu", hashes: gone });
  }
}
