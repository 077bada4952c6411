// KV block pool with a prefix cache, modelled on vLLM V1's BlockPool:
// - a fixed number of blocks; a request holds references (refCount) to the blocks of its sequence;
// - a full block gets a chained hash (parent hash, its token ids) and is entered in the prefix cache;
// - blocks with refCount 0 sit in a free queue ordered by eviction priority (least recently freed first);
//   a cached free block stays reusable until allocation evicts it from the head of that queue;
// - every cache change is recorded as a vLLM-style KV event (BlockStored / BlockRemoved /
//   AllBlocksCleared); the scheduler drains them once per step.

export type BlockHash = bigint; // unsigned 64-bit, as vLLM publishes with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1

export type KvEvent =
  | {
      type: "BlockStored";
      blockHashes: BlockHash[];
      parentBlockHash: BlockHash | null;
      tokenIds: number[];
      blockSize: number;
      /** The request's LoRA adapter (vLLM's lora_name); absent for the base model. */
      loraName?: string;
      /** vLLM's extra_keys, one entry per block: [lora_name?, cache_salt? (block 0 only)] or null. */
      extraKeys?: (string[] | null)[];
      /** Where the block is held; absent = "GPU". "CPU" = offloaded to the KV tier (offload.ts). */
      medium?: string;
    }
  | { type: "BlockRemoved"; blockHashes: BlockHash[]; medium?: string }
  | { type: "AllBlocksCleared" };

export interface Block {
  readonly id: number;
  refCount: number;
  hash: BlockHash | null;
}

/**
 * Chained block hash: xxh3-64 over parent hash (u64 LE) ‖ token ids (u32 LE), seeded per engine.
 * Written through typed-array views of one reused buffer (little-endian hosts only, like every
 * target herd ships for; a DataView and a Uint8Array per block were ~8 % of a long `herd simulate`).
 */
let scratch = new ArrayBuffer(8 + 4 * 64);
let scratchU64 = new BigUint64Array(scratch, 0, 1);
let scratchU32 = new Uint32Array(scratch);
let scratchBytes = new Map<number, Uint8Array>();

function hashInput(parent: BlockHash | null, n: number): Uint32Array {
  const size = 8 + 4 * n;
  if (scratch.byteLength < size) {
    scratch = new ArrayBuffer(size);
    scratchU64 = new BigUint64Array(scratch, 0, 1);
    scratchU32 = new Uint32Array(scratch);
    scratchBytes = new Map();
  }
  scratchU64[0] = parent ?? 0n;
  return scratchU32;
}

function hashScratch(seed: bigint, n: number): BlockHash {
  const size = 8 + 4 * n;
  let bytes = scratchBytes.get(size);
  if (bytes === undefined) scratchBytes.set(size, (bytes = new Uint8Array(scratch, 0, size)));
  return BigInt(Bun.hash.xxHash3(bytes, seed));
}

export function hashBlock(seed: bigint, parent: BlockHash | null, tokens: ArrayLike<number>): BlockHash {
  const u32 = hashInput(parent, tokens.length);
  // A Uint32Array store is ToUint32, the same as `>>> 0`.
  for (let i = 0; i < tokens.length; i++) u32[2 + i] = tokens[i]!;
  return hashScratch(seed, tokens.length);
}

/**
 * hashBlock over tokens [from, to) of the sequence `a ‖ b` (a prompt and its outputs so far), without
 * building the block's token array.
 */
export function hashBlockOf(seed: bigint, parent: BlockHash | null, a: ArrayLike<number>, b: ArrayLike<number>, from: number, to: number): BlockHash {
  const n = to - from;
  const u32 = hashInput(parent, n);
  const aLen = a.length;
  for (let i = from, k = 2; i < to; i++, k++) u32[k] = i < aLen ? a[i]! : b[i - aLen]!;
  return hashScratch(seed, n);
}

export class BlockPool {
  private readonly blocks: Block[];
  /**
   * Free blocks in eviction order, as an intrusive doubly-linked list over block ids (like vLLM's
   * FreeKVCacheBlockQueue): O(1) append, pop-front and removal from the middle (a prefix hit).
   * Index numBlocks is the sentinel; -1 in `prev` marks a block that is not in the queue.
   */
  private readonly next: Int32Array;
  private readonly prev: Int32Array;
  private free = 0;
  private readonly cached = new Map<BlockHash, Block>();
  private events: KvEvent[] = [];

  /** `recordEvents` false: no KV events are built (a scheduler nobody listens to; the cache is the same). */
  constructor(
    readonly numBlocks: number,
    readonly blockSize: number,
    private readonly recordEvents = true,
  ) {
    this.blocks = Array.from({ length: numBlocks }, (_, id) => ({ id, refCount: 0, hash: null }));
    this.next = new Int32Array(numBlocks + 1);
    this.prev = new Int32Array(numBlocks + 1).fill(-1);
    this.next[numBlocks] = numBlocks;
    this.prev[numBlocks] = numBlocks;
    for (const b of this.blocks) this.pushFree(b.id);
  }

  get numFree(): number {
    return this.free;
  }

  private pushFree(id: number): void {
    const s = this.numBlocks;
    const last = this.prev[s]!;
    this.next[last] = id;
    this.prev[id] = last;
    this.next[id] = s;
    this.prev[s] = id;
    this.free++;
  }

  private removeFree(id: number): void {
    const p = this.prev[id]!;
    const n = this.next[id]!;
    this.next[p] = n;
    this.prev[n] = p;
    this.prev[id] = -1;
    this.free--;
  }

  get numCached(): number {
    return this.cached.size;
  }

  /** Share of blocks referenced by requests (vLLM's kv_cache_usage_perc: cached free blocks count as free). */
  usage(): number {
    return this.numBlocks === 0 ? 0 : 1 - this.free / this.numBlocks;
  }

  /** Longest run of leading hashes present in the cache. */
  matchPrefix(hashes: readonly BlockHash[], limit = hashes.length): Block[] {
    const out: Block[] = [];
    const n = Math.min(limit, hashes.length);
    for (let i = 0; i < n; i++) {
      const b = this.cached.get(hashes[i]!);
      if (b === undefined) break;
      out.push(b);
    }
    return out;
  }

  /** Take a reference on cached blocks (a prefix hit); a free one leaves the free queue. */
  touch(blocks: readonly Block[]): void {
    for (const b of blocks) {
      if (b.refCount === 0) this.removeFree(b.id);
      b.refCount++;
    }
  }

  /** Allocate n blocks from the head of the free queue, evicting their cached contents; null if short. */
  allocate(n: number): Block[] | null {
    if (n > this.free) return null;
    const out: Block[] = [];
    for (let k = 0; k < n; k++) {
      const b = this.blocks[this.next[this.numBlocks]!]!;
      this.removeFree(b.id);
      out.push(b);
      if (b.hash !== null) {
        if (this.cached.get(b.hash) === b) this.cached.delete(b.hash);
        if (this.recordEvents) this.events.push({ type: "BlockRemoved", blockHashes: [b.hash] });
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
  store(
    entries: { block: Block; hash: BlockHash; tokens: ArrayLike<number> }[],
    parent: BlockHash | null,
    firstIndex = 0,
    lora: string | null = null,
    cacheSalt: string | null = null,
  ): void {
    let ev: (KvEvent & { type: "BlockStored" }) | null = null;
    let prev = parent;
    let index = firstIndex;
    for (const { block, hash, tokens } of entries) {
      if (block.hash === null && !this.cached.has(hash)) {
        block.hash = hash;
        this.cached.set(hash, block);
        if (!this.recordEvents) continue;
        if (ev === null || ev.blockHashes.length === 0) {
          ev = { type: "BlockStored", blockHashes: [], parentBlockHash: prev, tokenIds: [], blockSize: this.blockSize, extraKeys: [] };
          if (lora !== null) ev.loraName = lora;
          this.events.push(ev);
        }
        ev.blockHashes.push(hash);
        const keys: string[] = [];
        if (lora !== null) keys.push(lora);
        if (cacheSalt !== null && index === 0) keys.push(cacheSalt);
        ev.extraKeys!.push(keys.length > 0 ? keys : null);
        const ids = ev.tokenIds;
        for (let i = 0; i < tokens.length; i++) ids.push(tokens[i]!);
      } else {
        ev = null; // a gap: the next stored block starts a new event with its own parent
      }
      prev = hash;
      index++;
    }
  }

  /** Drop references; pass blocks in eviction order (vLLM frees a request's blocks tail first). */
  release(blocks: readonly Block[]): void {
    for (const b of blocks) {
      b.refCount--;
      if (b.refCount === 0) this.pushFree(b.id);
    }
  }

  /** release() of a request's blocks in reverse order (tail first, as vLLM frees them), without a copy. */
  releaseTailFirst(blocks: readonly Block[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) {
      const b = blocks[i]!;
      b.refCount--;
      if (b.refCount === 0) this.pushFree(b.id);
    }
  }

  /** vLLM's reset_prefix_cache: only when no block is in use; emits AllBlocksCleared. */
  reset(): boolean {
    if (this.free !== this.numBlocks) return false;
    for (const b of this.blocks) b.hash = null;
    this.cached.clear();
    if (this.recordEvents) this.events.push({ type: "AllBlocksCleared" });
    return true;
  }

  /** The events recorded since the last call (one vLLM KVEventBatch per scheduler step). */
  takeEvents(): KvEvent[] {
    const e = this.events;
    this.events = [];
    return e;
  }
}
