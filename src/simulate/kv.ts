// The KV side of a simulated cluster, in-process: each sim scheduler's KV events go through the real
// ingest translation (src/kv WorkerBlockMap: engine hashes → herd's sequence hashes) into the block
// index the `kv` policy reads — optionally `delayMs` late, as events over ZMQ would be — while a
// second, undelayed view records the truth the analysis needs:
//   - which blocks each engine holds right now (a BlockIndex fed at once);
//   - which blocks each engine evicted, stamped with that engine's eviction counter, so a later
//     request that needs an evicted block tells how many evictions ago it left the GPU: an LRU CPU
//     tier of X blocks fed by GPU evictions would still hold it iff that distance < X.
import type { Clock } from "../core/clock.ts";
import type { KvEvent as SimKvEvent } from "../engine/sim/blocks.ts";
import { BlockIndex } from "../kv/block-index.ts";
import type { IndexEvent, IndexStats, KvIndex, Medium, Overlap } from "../kv/indexer.ts";
import { WorkerBlockMap } from "../kv/worker-blocks.ts";
import { EvictionLog } from "./evictions.ts";
import type { KvEvent } from "../protocol/kv-events.ts";

/** Sim scheduler event → the decoded wire form the ingest path consumes (vLLM's fields, GPU medium). */
export function toWireEvent(e: SimKvEvent): KvEvent {
  if (e.type === "BlockStored") {
    return {
      type: "BlockStored", blockHashes: e.blockHashes, parentBlockHash: e.parentBlockHash, tokenIds: e.tokenIds, blockSize: e.blockSize,
      loraId: null, medium: null, loraName: null, cacheSalt: null, groupIdx: null, kvCacheSpecKind: null, slidingWindow: null, locality: null,
    };
  }
  if (e.type === "BlockRemoved") return { type: "BlockRemoved", blockHashes: e.blockHashes, medium: null, groupIdx: null, locality: null };
  return { type: "AllBlocksCleared" };
}

/** Evictions remembered per engine, as a multiple of its GPU capacity (the largest CPU tier considered). */
export const EVICTED_HORIZON = 8;

interface EngineKv {
  map: WorkerBlockMap;
  evicted: EvictionLog;
}

/** What a request found on its engine when it was dispatched. */
export interface ReuseProbe {
  /** Leading prompt blocks on the engine's GPU. */
  gpuHit: number;
  /**
   * For the blocks right after the GPU hit, in order, while each had been evicted from this engine:
   * how many evictions ago (the run stops at the first block the engine never held).
   */
  evictedDistances: number[];
}

export class SimKv {
  /** What the router reads (delayed when delayMs > 0). */
  readonly routerIndex: KvIndex;
  /** What the engines hold right now. */
  readonly truth = new BlockIndex();
  private readonly engines = new Map<string, EngineKv>();

  constructor(
    private readonly clock: Clock,
    private readonly delayMs: number,
    private readonly blockSize: number,
    private readonly gpuBlocks: number,
  ) {
    this.routerIndex = delayMs > 0 ? new BlockIndex() : this.truth;
  }

  /** The scheduler's onKvEvents for one engine. */
  sink(worker: string): (events: SimKvEvent[]) => void {
    const eng: EngineKv = { map: null as unknown as WorkerBlockMap, evicted: new EvictionLog(EVICTED_HORIZON * this.gpuBlocks) };
    eng.map = new WorkerBlockMap(worker, this.fanout(eng), { blockSize: this.blockSize });
    this.engines.set(worker, eng);
    return (events) => {
      for (const e of events) eng.map.apply(toWireEvent(e));
    };
  }

  probe(worker: string, hashes: readonly bigint[]): ReuseProbe {
    let gpuHit = 0;
    while (gpuHit < hashes.length && this.truth.holds(worker, hashes[gpuHit]!, "gpu")) gpuHit++;
    const eng = this.engines.get(worker);
    const evictedDistances: number[] = [];
    if (eng) {
      for (let i = gpuHit; i < hashes.length; i++) {
        const d = eng.evicted.distance(hashes[i]!);
        if (d === undefined) break;
        evictedDistances.push(d);
      }
    }
    return { gpuHit, evictedDistances };
  }

  /** An index that applies to the truth and the tracker at once and to the router's index after the delay. */
  private fanout(eng: EngineKv): KvIndex {
    const truth = this.truth;
    const router = this.routerIndex;
    // delayMs = 0: the router reads the truth itself, nothing to forward (and no closure per event).
    const delayed = router !== truth;
    const later = (fn: () => void) => void this.clock.setTimer(this.delayMs, fn);
    const track = (event: IndexEvent) => {
      if (event.kind === "stored") for (const h of event.hashes) eng.evicted.stored(h);
      else if (event.kind === "removed") for (const h of event.hashes) eng.evicted.evicted(h);
      else eng.evicted.clear();
    };
    return {
      apply(worker: string, event: IndexEvent, unchanged?: (i: number) => void) {
        truth.apply(worker, event, unchanged);
        track(event);
        if (delayed) later(() => router.apply(worker, event));
      },
      clearWorker(worker: string) {
        truth.clearWorker(worker);
        if (delayed) later(() => router.clearWorker(worker));
      },
      removeWorker(worker: string) {
        truth.removeWorker(worker);
        if (delayed) later(() => router.removeWorker(worker));
      },
      findMatches: (hashes: readonly bigint[]): Map<string, Overlap> => truth.findMatches(hashes),
      holds: (worker: string, hash: bigint, medium: Medium) => truth.holds(worker, hash, medium),
      size: () => truth.size(),
      stats: (): IndexStats => truth.stats(),
    };
  }
}
