// Obviously-correct reference index: nested Maps and Sets. Used as the oracle in differential
// tests against BlockIndex; far too heavy for production (hundreds of bytes per block).
import type { IndexEvent, IndexStats, KvIndex, Medium, Overlap } from "../../src/kv/indexer.ts";
import { MEDIA } from "../../src/kv/indexer.ts";

export class NaiveIndex implements KvIndex {
  /** hash → worker → media held */
  private blocks = new Map<bigint, Map<string, Set<Medium>>>();
  private known = new Set<string>();

  apply(worker: string, ev: IndexEvent, unchanged?: (i: number) => void): void {
    this.known.add(worker);
    if (ev.kind === "cleared") return this.clearWorker(worker);
    for (let i = 0; i < ev.hashes.length; i++) {
      const h = ev.hashes[i]!;
      const had = this.holds(worker, h, ev.medium);
      if (had === (ev.kind === "stored")) unchanged?.(i);
      let holders = this.blocks.get(h);
      if (ev.kind === "stored") {
        if (!holders) this.blocks.set(h, (holders = new Map()));
        let media = holders.get(worker);
        if (!media) holders.set(worker, (media = new Set()));
        media.add(ev.medium);
      } else if (holders) {
        const media = holders.get(worker);
        if (!media) continue;
        media.delete(ev.medium);
        if (media.size === 0) holders.delete(worker);
        if (holders.size === 0) this.blocks.delete(h);
      }
    }
  }

  findMatches(hashes: readonly bigint[]): Map<string, Overlap> {
    const out = new Map<string, Overlap>();
    const first = hashes.length > 0 ? this.blocks.get(hashes[0]!) : undefined;
    if (!first) return out;
    for (const worker of first.keys()) {
      // Tiers (indexer.ts Overlap): each medium's run continues the faster media's.
      const ends = MEDIA.map((_, tier) => {
        let n = 0;
        while (n < hashes.length && MEDIA.slice(0, tier + 1).some((m) => this.holds(worker, hashes[n]!, m))) n++;
        return n;
      });
      const o: Overlap = { gpu: ends[0]!, cpu: ends[1]! - ends[0]!, disk: ends[2]! - ends[1]! };
      out.set(worker, o);
    }
    return out;
  }

  holds(worker: string, hash: bigint, medium: Medium): boolean {
    return this.blocks.get(hash)?.get(worker)?.has(medium) ?? false;
  }

  removeWorker(worker: string): void {
    this.clearWorker(worker);
    this.known.delete(worker);
  }

  clearWorker(worker: string): void {
    for (const [h, holders] of this.blocks) {
      holders.delete(worker);
      if (holders.size === 0) this.blocks.delete(h);
    }
  }

  size(): number {
    return this.blocks.size;
  }

  stats(): IndexStats {
    let entries = 0;
    for (const holders of this.blocks.values()) for (const media of holders.values()) entries += media.size;
    return { blocks: this.blocks.size, entries, workers: this.known.size, bytes: null };
  }

  /** Every (worker, hash, medium) held, for comparing against an engine's true cache in tests. */
  snapshot(): Set<string> {
    const s = new Set<string>();
    for (const [h, holders] of this.blocks) for (const [w, media] of holders) for (const m of media) s.add(`${w}|${h}|${m}`);
    return s;
  }
}
