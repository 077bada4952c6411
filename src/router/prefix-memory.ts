// What the router itself sent where: the `prefix` policy's stand-in for engine KV events, and the
// `kv` policy's short-lived "predicted" entries that cover the gap between a decision and the
// engine's BlockStored events (Dynamo's predict-on-route, llm-d's speculative indexing;
// docs/references.md#routers-1.7, #routers-8 (lesson 5)).
//
// Bounded twice: a block counts only for `ttlMs` after the last request that sent it, and each
// worker remembers at most `maxBlocksPerWorker` tracked hashes (sampling.ts: every block of a
// prompt's first 64, then every 8th), least recently sent forgotten first (a Map in recency order,
// keyed by numbers so that no entry is a heap object for the GC to mark).
//
// Per worker, what is remembered is prefix-closed and its expiry never increases with depth: a
// block's sequence hash names its whole prefix, and every send refreshes a prompt's blocks deepest
// first, so a parent is always at least as recent as any child. The leading run a worker holds is
// therefore found by binary search (log n lookups per worker, no walk over the prompt). Expiries
// are rounded up to 1/64 of the TTL: re-sending a prompt within the same slice changes nothing.
import { blocksCovered, trackedKeys } from "./sampling.ts";

export class PrefixMemory {
  /** Per worker: mapKey(block hash) → expiry (ms), least recent first. */
  private readonly workers = new Map<string, Map<number, number>>();
  /** Per worker: the newest expiry recorded (entries are in expiry order; this is the last). */
  private readonly newest = new Map<string, number>();
  /** Per worker: until then, removed entries may have left holes (dropRemoved): verify runs. */
  private readonly holesUntil = new Map<string, number>();
  private readonly sliceMs: number;

  constructor(
    readonly ttlMs: number,
    readonly maxBlocksPerWorker: number,
  ) {
    this.sliceMs = Math.max(1, Math.ceil(ttlMs / 64));
  }

  /** Remember that a prompt's leading blocks (sequence hashes) were sent to `worker` at `nowMs`. */
  record(worker: string, prompt: readonly bigint[], nowMs: number): void {
    if (prompt.length === 0 || this.ttlMs <= 0) return;
    // Only the first `maxBlocksPerWorker` tracked blocks: a longer prompt would evict its own head
    // and leave a suffix no lookup can reach.
    const all = trackedKeys(prompt);
    const keys = all.length > this.maxBlocksPerWorker ? all.slice(0, this.maxBlocksPerWorker) : all;
    let m = this.workers.get(worker);
    if (!m) this.workers.set(worker, (m = new Map()));
    const expiry = Math.ceil((nowMs + this.ttlMs) / this.sliceMs) * this.sliceMs;
    if (m.get(keys[keys.length - 1]!) === expiry && !this.holey(worker, nowMs)) return; // sent in this slice already (and so is its prefix)
    this.newest.set(worker, expiry);
    for (let i = keys.length - 1; i >= 0; i--) {
      m.delete(keys[i]!);
      m.set(keys[i]!, expiry);
    }
    for (const [k, exp] of m) {
      if (m.size <= this.maxBlocksPerWorker && exp > nowMs) break;
      m.delete(k);
    }
  }

  /** Leading blocks of a prompt each worker is remembered to hold at `nowMs` (workers with none absent). */
  overlaps(prompt: readonly bigint[], nowMs: number): Map<string, number> {
    const out = new Map<string, number>();
    if (prompt.length === 0 || this.workers.size === 0) return out;
    const keys = trackedKeys(prompt);
    for (const [worker, m] of this.workers) {
      // Largest n with keys[0..n) all remembered and unexpired (prefix-closed, monotone expiry).
      let lo = 0;
      let hi = keys.length;
      while (lo < hi) {
        const mid = (lo + hi + 1) >>> 1;
        if ((m.get(keys[mid - 1]!) ?? 0) > nowMs) lo = mid;
        else hi = mid - 1;
      }
      // A removal may have cut the run: the binary search then errs long, never short; walk it.
      if (lo > 0 && this.holey(worker, nowMs)) {
        let j = 0;
        while (j < lo && (m.get(keys[j]!) ?? 0) > nowMs) j++;
        lo = j;
      }
      if (lo > 0) out.set(worker, blocksCovered(lo));
    }
    return out;
  }

  /**
   * The engine evicted blocks (`pairs`: u32 halves of their hashes, the first `n`; from the KV
   * index's removal listener): credit the worker with none of them any more. Only the removed
   * entries go. Their descendants stay, unreachable (a leading run stops at the hole), so until every
   * entry older than the removal has expired (`holesUntil`) the worker's lookups verify the run
   * block by block instead of trusting the binary search; a prompt sent again afterwards records its
   * whole prefix, so it never creates a hole. A removed block that is not tracked (sampling.ts: past
   * the first 64, between strides) costs at most one stride of credit until a tracked one goes.
   * Returns the entries dropped.
   */
  dropRemoved(worker: string, pairs: Uint32Array, n: number): number {
    const m = this.workers.get(worker);
    if (!m || m.size === 0) return 0;
    let dropped = 0;
    for (let i = 0; i < n; i++) if (m.delete(pairs[2 * i]! + (pairs[2 * i + 1]! & 0xfffff) * 4294967296)) dropped++;
    if (dropped > 0) this.holesUntil.set(worker, Math.max(this.holesUntil.get(worker) ?? 0, this.newest.get(worker) ?? 0));
    return dropped;
  }

  /** Tracked hashes remembered for a worker (expired ones included until evicted). */
  size(worker: string): number {
    return this.workers.get(worker)?.size ?? 0;
  }

  private holey(worker: string, nowMs: number): boolean {
    const until = this.holesUntil.get(worker);
    if (until === undefined) return false;
    if (until > nowMs) return true;
    this.holesUntil.delete(worker);
    return false;
  }

  forget(worker: string): void {
    this.workers.delete(worker);
    this.newest.delete(worker);
    this.holesUntil.delete(worker);
  }
}
