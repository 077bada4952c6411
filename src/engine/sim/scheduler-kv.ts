// The sim scheduler's KV bookkeeping around its BlockPool: a request's chained block hashes, its
// prefix-cache hit, entering computed (or imported) full blocks in the cache, and the KV event
// batches — with an offload tier, the herd hashes of cached prompt blocks so an eviction can name
// them in the tier (vLLM's offloading keeps what the GPU drops).

import { type Block, type BlockHash, type BlockPool, type KvEvent, hashBlockOf } from "./blocks.ts";
import { blockSeed, blockTokens, herdHashes, type Req, seqLen } from "./scheduler-request.ts";
import type { SchedulerConfig, SchedulerOffload } from "./scheduler-types.ts";

const NO_TOKENS: readonly number[] = [];

export class SchedulerKv {
  /** The KV tier below the prefix cache (sim `--kv-offload-url`), null without one. */
  offload: SchedulerOffload | null = null;
  /** With an offload tier: herd hash of each cached prompt block, by engine hash (bounded by the pool). */
  private readonly herdOf = new Map<BlockHash, bigint>();

  constructor(
    private readonly cfg: SchedulerConfig,
    private readonly pool: BlockPool,
    private readonly onKvEvents: (events: KvEvent[]) => void,
  ) {}

  /** Cached leading blocks of a request; at least one token is always left to compute (as in vLLM). */
  prefixHit(r: Req): Block[] {
    const maxBlocks = Math.floor((seqLen(r) - 1) / this.cfg.blockSize);
    this.extendHashes(r, maxBlocks);
    return this.pool.matchPrefix(r.hashes, maxBlocks);
  }

  extendHashes(r: Req, upTo: number): void {
    const bs = this.cfg.blockSize;
    for (let i = r.hashes.length; i < upTo; i++) {
      r.hashes.push(hashBlockOf(blockSeed(this.cfg.hashSeed, r.sub, i), i === 0 ? null : r.hashes[i - 1]!, r.prompt, r.out, i * bs, (i + 1) * bs));
    }
  }

  storeFullBlocks(r: Req): void {
    const bs = this.cfg.blockSize;
    const full = Math.floor(r.numComputed / bs);
    if (full <= r.numStored) return;
    this.extendHashes(r, full);
    const entries = [];
    const events = this.cfg.kvEvents !== false; // the token ids are for the BlockStored event only
    for (let i = r.numStored; i < full; i++) entries.push({ block: r.blocks[i]!, hash: r.hashes[i]!, tokens: events ? blockTokens(r, i, bs) : NO_TOKENS });
    this.pool.store(entries, r.numStored === 0 ? null : r.hashes[r.numStored - 1]!, r.numStored, r.sub.lora ?? null, r.sub.cacheSalt ?? null);
    if (this.offload !== null) this.noteHerdHashes(r, r.numStored, full);
    r.numStored = full;
  }

  /**
   * Enter `blocks`, holding the first blocks of `prompt` (a P/D transfer), in the prefix cache
   * under this engine's hashes, and send their BlockStored events.
   */
  storeImported(blocks: readonly Block[], prompt: ArrayLike<number>, lora: string | null, cacheSalt: string | null): void {
    const bs = this.cfg.blockSize;
    const sub = { lora, cacheSalt };
    const entries = [];
    let parent: BlockHash | null = null;
    const none: number[] = [];
    for (let i = 0; i < blocks.length; i++) {
      const hash = hashBlockOf(blockSeed(this.cfg.hashSeed, sub, i), parent, prompt, none, i * bs, (i + 1) * bs);
      const tokens = Array.from({ length: bs }, (_, k) => prompt[i * bs + k]!);
      entries.push({ block: blocks[i]!, hash, tokens });
      parent = hash;
    }
    this.pool.store(entries, null, 0, lora, cacheSalt);
    this.flushEvents();
  }

  /** Remember the herd hashes of newly cached prompt blocks, so an eviction can name them in the tier. */
  private noteHerdHashes(r: Req, from: number, to: number): void {
    const promptBlocks = Math.floor(r.promptLen / this.cfg.blockSize);
    if (from >= promptBlocks) return; // output blocks are not offloaded
    const herd = herdHashes(r, this.cfg.blockSize);
    for (let i = from; i < Math.min(to, promptBlocks); i++) {
      const b = r.blocks[i]!;
      if (b.hash === r.hashes[i]) this.herdOf.set(r.hashes[i]!, herd[i]!);
    }
  }

  /** The pool's events since the last batch go out as one batch (evictions to the tier first). */
  flushEvents(): void {
    const ev = this.pool.takeEvents();
    if (ev.length === 0) return;
    if (this.offload !== null) this.offloadEvictions(ev, this.offload);
    this.onKvEvents(ev);
  }

  /** Evicted prompt blocks go to the tier (vLLM's offloading keeps what the GPU drops). */
  private offloadEvictions(ev: readonly KvEvent[], offload: SchedulerOffload): void {
    for (const e of ev) {
      if (e.type === "AllBlocksCleared") this.herdOf.clear();
      if (e.type !== "BlockRemoved") continue;
      for (const h of e.blockHashes) {
        const herd = this.herdOf.get(h);
        if (herd === undefined) continue;
        this.herdOf.delete(h);
        offload.offloadEvicted(h, herd);
      }
    }
  }
}
