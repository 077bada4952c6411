// KV block pool with a prefix cache, modelled on vLLM V1's BlockPool:
// - a fixed number of blocks; a request holds references (refCount) to the blocks of its sequence;
// - a full block gets a chained hash (parent hash, its token ids) and is entered in the prefix cache;
// - blocks with refCount 0 sit in a free queue ordered by eviction priority (least recently freed first);
//   a cached free block stays reusable until allocation evicts it from the head of that queue;
// - every cache change is recorded as a vLLM-style KV event (BlockStored / BlockRemoved /
//   AllBlocksCleared); the scheduler drains them once per step.

export type BlockHash = bigint; // unsigned 64-bit, as vLLM publishes with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1

export type KvEvent =
  | { type: "BlockStored"; blockHashes: BlockHash[]; parentBlockHash: BlockHash | null; tokenIds: number[]; blockSize: number }
  | { type: "BlockRemoved"; blockHashes: BlockHash[] }
  | { type: "AllBlocksCleared" };

export interface Block {
  readonly id: number;
  refCount: number;
  hash: BlockHash | null;
}

/** Chained block hash: xxh3-64 over parent hash (u64 LE) ‖ token ids (u32 LE), seeded per engine. */
export function hashBlock(seed: bigint, parent: BlockHash | null, tokens: readonly number[]): BlockHash {
  const buf = new ArrayBuffer(8 + 4 * tokens.length);
  const view = new DataView(buf);
  view.setBigUint64(0, parent ?? 0n, true);
  for (let i = 0; i < tokens.length; i++) view.setUint32(8 + 4 * i, tokens[i]! >>> 0, true);
  return BigInt(Bun.hash.xxHash3(new Uint8Array(buf), seed));
}

export class BlockPool {
  private readonly blocks: Block[];
  /** Free blocks in eviction order: Map iteration order is insertion order, so the first key is evicted next. */
  private readonly freeQueue = new Map<number, Block>();
  private readonly cached = new Map<BlockHash, Block>();
  private events: KvEvent[] = [];

  constructor(
    readonly numBlocks: number,
    readonly blockSize: number,
  ) {
    this.blocks = Array.from({ length: numBlocks }, (_, id) => ({ id, refCount: 0, hash: null }));
    for (const b of this.blocks) this.freeQueue.set(b.id, b);
  }

  get numFree(): number {
    return this.freeQueue.size;
  }

  get numCached(): number {
    return this.cached.size;
  }

  /** Share of blocks referenced by requests (vLLM's kv_cache_usage_perc: cached free blocks count as free). */
  usage(): number {
    return this.numBlocks === 0 ? 0 : 1 - this.freeQueue.size / this.numBlocks;
  }

  /** Longest run of leading hashes present in the cache. */
  matchPrefix(hashes: readonly BlockHash[]): Block[] {
    const out: Block[] = [];
    for (const h of hashes) {
      const b = this.cached.get(h);
      if (b === undefined) break;
      out.push(b);
    }
    return out;
  }

  /** Take a reference on cached blocks (a prefix hit); a free one leaves the free queue. */
  touch(blocks: readonly Block[]): void {
    for (const b of blocks) {
      if (b.refCount === 0) this.freeQueue.delete(b.id);
      b.refCount++;
    }
  }

  /** Allocate n blocks from the head of the free queue, evicting their cached contents; null if short. */
  allocate(n: number): Block[] | null {
    if (n > this.freeQueue.size) return null;
    const out: Block[] = [];
    for (const b of this.freeQueue.values()) {
      if (out.length === n) break;
      out.push(b);
    }
    for (const b of out) {
      this.freeQueue.delete(b.id);
      if (b.hash !== null) {
        if (this.cached.get(b.hash) === b) this.cached.delete(b.hash);
        this.events.push({ type: "BlockRemoved", blockHashes: [b.hash] });
        b.hash = null;
      }
      b.refCount = 1;
    }
    return out;
  }

  /**
   * Enter full blocks of one request in the prefix cache. `entries` are consecutive blocks of the
   * sequence; `parent` is the hash of the block before the first. A hash already cached by another
   * block (two requests computed the same prefix at once) is not entered twice.
   */
  store(entries: { block: Block; hash: BlockHash; tokens: readonly number[] }[], parent: BlockHash | null): void {
    let ev: (KvEvent & { type: "BlockStored" }) | null = null;
    let prev = parent;
    for (const { block, hash, tokens } of entries) {
      if (block.hash === null && !this.cached.has(hash)) {
        block.hash = hash;
        this.cached.set(hash, block);
        if (ev === null || ev.blockHashes.length === 0) {
          ev = { type: "BlockStored", blockHashes: [], parentBlockHash: prev, tokenIds: [], blockSize: this.blockSize };
          this.events.push(ev);
        }
        ev.blockHashes.push(hash);
        ev.tokenIds.push(...tokens);
      } else {
        ev = null; // a gap: the next stored block starts a new event with its own parent
      }
      prev = hash;
    }
  }

  /** Drop references; pass blocks in eviction order (vLLM frees a request's blocks tail first). */
  release(blocks: readonly Block[]): void {
    for (const b of blocks) {
      b.refCount--;
      if (b.refCount === 0) this.freeQueue.set(b.id, b);
    }
  }

  /** vLLM's reset_prefix_cache: only when no block is in use; emits AllBlocksCleared. */
  reset(): boolean {
    if (this.freeQueue.size !== this.numBlocks) return false;
    for (const b of this.blocks) b.hash = null;
    this.cached.clear();
    this.events.push({ type: "AllBlocksCleared" });
    return true;
  }

  /** The events recorded since the last call (one vLLM KVEventBatch per scheduler step). */
  takeEvents(): KvEvent[] {
    const e = this.events;
    this.events = [];
    return e;
  }
}
