// One worker's translation from engine events to index events. The engine names blocks by its own
// hashes (sha256/xxhash/Python hash, PYTHONHASHSEED-dependent); herd names them by Dynamo-style
// sequence hashes of their tokens (hash.ts). This map remembers engine hash → herd hash and on
// which media the worker holds it, so removals (which carry only engine hashes) and children
// (whose parent is an engine hash) can be resolved. Filtering follows Dynamo's normalizer
// (docs/references.md#engines-7): REMOTE-locality events and non-main-attention KV groups are dropped.
import type { BlockRemoved, BlockStored, KvEvent } from "../protocol/kv-events.ts";
import { chainHashesU32, saltRoot } from "./hash.ts";
import { IndexApplier, type WorkerIndexSink } from "./index-sink.ts";
import type { KvIndex, Medium } from "./indexer.ts";
import { MEDIUM_INDEX } from "./indexer.ts";
import { U64Table, hi32, lo32 } from "./u64-table.ts";

/** Engine medium strings → herd's three tiers; null = unknown (event skipped and counted). */
export function normalizeMedium(m: string | null): Medium | null {
  if (m === null || m === "GPU") return "gpu"; // every event of a GPU-only engine: no toUpperCase copy
  switch (m.toUpperCase()) {
    case "GPU":
    case "DEVICE":
    case "CUDA":
    case "HBM":
      return "gpu";
    case "CPU":
    case "CPU_PINNED":
    case "CPU_TIER1":
    case "HOST":
      return "cpu";
    // Everything slower than host memory is "disk": local SSD and shared/remote pools alike
    // (reading either costs a transfer the cost model treats as the slowest tier).
    case "DISK":
    case "NVME":
    case "SSD":
    case "STORAGE":
    case "CPU_TIER2":
    case "EXTERNAL":
    case "NETWORK":
    case "REMOTE":
    case "SHARED":
      return "disk";
    default:
      return null;
  }
}

const MAIN_ATTENTION = new Set(["full_attention", "mla_attention", "sink_full_attention"]);

export interface WorkerBlockCounters {
  /** Blocks newly recorded as held (after dedup). */
  blocksStored: number;
  blocksRemoved: number;
  /** Stores skipped because the parent engine hash is unknown (joined mid-stream, lost events). */
  parentMissing: number;
  /** Removals of engine hashes this worker is not known to hold on that medium. */
  unknownRemovals: number;
  /** Events dropped by filters (REMOTE locality, non-main KV group, other block size). */
  filtered: number;
  /** Events whose medium string is not known. */
  unknownMedium: number;
  /** Blocks announced by hash without enough tokens to hash them. */
  truncatedBlocks: number;
  /** Blocks a connector reported by engine hash alone (no tokens) that this worker's map does not know. */
  unresolvedBlocks: number;
}

// Per engine hash: herd hash (2 words) and the media bitmask (bit MEDIUM_INDEX[m]), at these
// offsets from the slot's first value word.
const W_LO = 0;
const W_HI = 1;
const W_MEDIA = 2;

export class WorkerBlockMap {
  private map = new U64Table(3, 256);
  /** Where index events go: the shared index (through an IndexApplier) or an ingest thread's op stream. */
  private readonly sink: WorkerIndexSink;
  private groupKinds = new Map<number, string>();
  /** Block size of this worker's events (fixed at construction, or learned from the first store). */
  blockSize: number | null;
  readonly counters: WorkerBlockCounters = {
    blocksStored: 0, blocksRemoved: 0, parentMissing: 0, unknownRemovals: 0, filtered: 0, unknownMedium: 0, truncatedBlocks: 0, unresolvedBlocks: 0,
  };

  /**
   * `target`: the index itself (events applied at once; blocksStored/blocksRemoved counted here), or
   * a sink (an ingest thread's op recorder: the applier on the index's thread counts those two).
   */
  constructor(
    readonly worker: string,
    target: KvIndex | WorkerIndexSink,
    opts: { blockSize?: number } = {},
  ) {
    this.blockSize = opts.blockSize ?? null;
    this.sink = "cleared" in target ? target : new IndexApplier(worker, target, this.counters);
  }

  apply(ev: KvEvent): void {
    this.applyDeferred(ev);
    this.flush();
  }

  /**
   * apply() for a batch's events, one at a time, with consecutive removals on one medium handed to
   * the index together (vLLM sends one BlockRemoved per evicted block): call flush() after the
   * batch. Removals are flushed before any store or clear, so the index sees the events' order.
   */
  applyDeferred(ev: KvEvent): void {
    if (ev.type === "BlockStored") {
      this.flush();
      this.stored(ev);
    } else if (ev.type === "BlockRemoved") {
      this.removed(ev);
    } else {
      this.flush();
      this.clear();
    }
  }

  /** Hand removals collected by applyDeferred to the index. */
  flush(): void {
    const n = this.goneCount;
    if (n === 0) return;
    this.goneCount = 0;
    this.sink.removed(this.goneMedium, this.gone, n);
  }

  /** Forget everything this worker holds (AllBlocksCleared, resync, restart). */
  clear(): void {
    this.sink.cleared();
    this.map.clear();
  }

  /** Size the engine-hash map for `blocks` blocks up front (e.g. the engine's num_gpu_blocks). */
  reserve(blocks: number): void {
    this.map.reserve(blocks);
  }

  /**
   * Called once, at the worker's first eviction (a removal that drops an engine hash from the map),
   * with the engine hashes held just before it: an engine evicts only when its KV cache is full
   * (vLLM emits BlockRemoved when a cached block is reused, vllm/v1/core/block_pool.py
   * `_maybe_evict_cached_block`; SGLang's radix cache when its pool is full), so that count is
   * ≈ its capacity. KvEventStream sizes the tables from it when no capacity hint was given.
   */
  onFirstEviction: ((heldBlocks: number) => void) | null = null;
  private evicted = false;

  /** Slots of the engine-hash map (its capacity; tests read how it was sized). */
  get slots(): number {
    return this.map.cap;
  }

  /**
   * Touch the home records of `count` engine hashes at `hp[2·hStart …]` before they are looked up:
   * independent loads overlap, so a batch's removals (one event per block) cost a few cache misses
   * in a large map instead of one serial miss each (as BlockIndex.applyPairs does for the index).
   */
  prefetch(hp: Uint32Array, hStart: number, count: number): void {
    let t = 0;
    for (let i = hStart; i < hStart + count; i++) t |= this.map.touch(hp[2 * i]!, hp[2 * i + 1]!);
    this.touched = t;
  }
  /** Keeps prefetch()'s loads alive (never read). */
  touched = 0;

  /** Engine block hashes currently mapped. */
  get size(): number {
    return this.map.count;
  }

  bytes(): number {
    return this.map.bytes();
  }

  private accepted(groupIdx: number | null, kind: string | null, locality: string | null): boolean {
    if (locality !== null && locality.toUpperCase() !== "LOCAL") return false;
    if (groupIdx === null) return true;
    if (kind !== null) this.groupKinds.set(groupIdx, kind);
    const known = this.groupKinds.get(groupIdx);
    return known === undefined ? groupIdx === 0 : MAIN_ATTENTION.has(known);
  }

  /** Herd hashes of the current event's blocks, then the ones to index, as u32 halves (reused). */
  private ours = new Uint32Array(64);
  private added = new Uint32Array(64);
  /** Removals waiting for flush(): herd hashes as u32 halves, all on goneMedium. */
  private gone = new Uint32Array(64);
  private goneCount = 0;
  private goneMedium: Medium = "gpu";

  /** Event hashes as u32 pairs when they came as bigints (apply() with decodeKvEventBatch). */
  private evPairs = new Uint32Array(64);

  private pairsOf(hashes: readonly bigint[]): Uint32Array {
    if (this.evPairs.length < 2 * hashes.length) this.evPairs = new Uint32Array(2 * hashes.length);
    const out = this.evPairs;
    for (let i = 0; i < hashes.length; i++) {
      out[2 * i] = lo32(hashes[i]!);
      out[2 * i + 1] = hi32();
    }
    return out;
  }

  private stored(ev: BlockStored): void {
    const hp = ev.hashPairs ?? this.pairsOf(ev.blockHashes);
    const count = ev.hashPairs !== undefined ? hp.length >>> 1 : ev.blockHashes.length;
    let hasParent = false;
    let plo = 0;
    let phi = 0;
    if (ev.parentBlockHash !== null) {
      // (a parent is one BigInt per event, not per block: lo32 is fine here)
      hasParent = true;
      plo = lo32(ev.parentBlockHash);
      phi = hi32();
    }
    this.storedFrom(ev.groupIdx, ev.kvCacheSpecKind, ev.locality, ev.medium, ev.tokenIds, ev.blockSize, hasParent, plo, phi, ev.cacheSalt, ev.loraName, hp, 0, count);
  }

  /**
   * A BlockStored given field by field (ingest's fast path, kv-events-fast.ts, calls this with the
   * batch's columns): `count` engine hashes at `hp[2·hStart …]`, the parent's engine hash as u32
   * halves when `hasParent`.
   */
  storedFrom(
    groupIdx: number | null,
    kind: string | null,
    locality: string | null,
    mediumName: string | null,
    tokenIds: ArrayLike<number>,
    blockSize: number,
    hasParentHash: boolean,
    parentLo: number,
    parentHi: number,
    cacheSalt: string | null,
    loraName: string | null,
    hp: Uint32Array,
    hStart: number,
    count: number,
  ): void {
    if (!this.accepted(groupIdx, kind, locality)) return void this.counters.filtered++;
    const medium = normalizeMedium(mediumName);
    if (medium === null) return void this.counters.unknownMedium++;
    if (tokenIds.length === 0 && !hasParentHash && count > 0) return this.storedByHash(blockSize, medium, hp, hStart, count);
    if (this.blockSize === null) this.blockSize = blockSize;
    // Prompts are hashed with the worker's block size; blocks of another size can never match.
    if (blockSize !== this.blockSize) return void this.counters.filtered++;
    let hasParent = false;
    let plo = 0;
    let phi = 0;
    if (hasParentHash) {
      const ps = this.map.find(parentLo, parentHi);
      if (ps < 0) return void this.counters.parentMissing++;
      hasParent = true;
      plo = this.map.data[this.map.at(ps) + W_LO]!;
      phi = this.map.data[this.map.at(ps) + W_HI]!;
    } else if (cacheSalt) {
      // A salted request's block 0: the salt is its virtual parent (kv/hash.ts), as routing hashes it.
      const root = saltRoot(cacheSalt)!;
      hasParent = true;
      plo = Number(root & 0xffffffffn);
      phi = Number(root >> 32n);
    }
    const want = Math.min(Math.floor(tokenIds.length / blockSize), count);
    if (this.ours.length < 2 * want) {
      this.ours = new Uint32Array(2 * want);
      this.added = new Uint32Array(2 * want);
    }
    const ours = this.ours;
    const added = this.added;
    const n = chainHashesU32(tokenIds, blockSize, hasParent, plo, phi, loraName, want, ours);
    this.counters.truncatedBlocks += count - n;
    const mi = MEDIUM_INDEX[medium];
    const mbit = 1 << mi;
    let nAdded = 0;
    for (let i = 0; i < n; i++) {
      const olo = ours[2 * i]!;
      const ohi = ours[2 * i + 1]!;
      const lo = hp[2 * (hStart + i)]!;
      const hi = hp[2 * (hStart + i) + 1]!;
      let slot = this.map.insert(lo, hi);
      if (!this.map.inserted) {
        const at = this.map.at(slot);
        const v = this.map.data;
        if (v[at + W_LO] === olo && v[at + W_HI] === ohi) {
          if ((v[at + W_MEDIA]! & mbit) !== 0) continue; // already held there
        } else {
          // Same engine hash, different content: the engine reused the id. Drop the old meaning.
          this.dropEngineEntry(slot);
          slot = this.map.insert(lo, hi);
        }
      }
      const at = this.map.at(slot);
      const v = this.map.data;
      v[at + W_LO] = olo;
      v[at + W_HI] = ohi;
      v[at + W_MEDIA] = v[at + W_MEDIA]! | mbit;
      added[2 * nAdded] = olo;
      added[2 * nAdded + 1] = ohi;
      nAdded++;
    }
    this.credit(medium, added, nAdded);
  }

  /**
   * A store by engine hash alone: vLLM's OffloadingConnector reports the blocks it copied to CPU as
   * BlockStored with `token_ids: []`, `parent_block_hash: None`, `medium` = its spec's medium ("CPU")
   * and the offloaded blocks' hashes (vllm/distributed/kv_transfer/kv_connector/v1/
   * offloading_connector.py `take_events`; CPULoadStoreSpec.medium() in vllm/v1/kv_offload). Those
   * hashes are the GPU prefix cache's own (`request.block_hashes[factor - 1 :: factor]`), which the
   * GPU's BlockStored already mapped to herd hashes here, so each known one is credited on `medium`.
   * An offloaded block of k > 1 GPU blocks names only its last one (the other k − 1 are not
   * identified): such events are filtered. `block_size` 0 (newer vLLM) is taken as the GPU's.
   */
  private storedByHash(blockSize: number, medium: Medium, hp: Uint32Array, hStart: number, count: number): void {
    if (blockSize !== 0 && this.blockSize !== null && blockSize !== this.blockSize) return void this.counters.filtered++;
    if (this.added.length < 2 * count) this.added = new Uint32Array(2 * count);
    const added = this.added;
    const mbit = 1 << MEDIUM_INDEX[medium];
    let nAdded = 0;
    for (let i = 0; i < count; i++) {
      const slot = this.map.find(hp[2 * (hStart + i)]!, hp[2 * (hStart + i) + 1]!);
      if (slot < 0) {
        this.counters.unresolvedBlocks++;
        continue;
      }
      const at = this.map.at(slot);
      const v = this.map.data;
      if ((v[at + W_MEDIA]! & mbit) !== 0) continue; // already held there
      v[at + W_MEDIA] = v[at + W_MEDIA]! | mbit;
      added[2 * nAdded] = v[at + W_LO]!;
      added[2 * nAdded + 1] = v[at + W_HI]!;
      nAdded++;
    }
    this.credit(medium, added, nAdded);
  }

  /** Index the newly held herd hashes (u32 pairs) on `medium`. */
  private credit(medium: Medium, added: Uint32Array, nAdded: number): void {
    if (nAdded > 0) this.sink.stored(medium, added, nAdded);
  }

  private removed(ev: BlockRemoved): void {
    const hp = ev.hashPairs ?? this.pairsOf(ev.blockHashes);
    const count = ev.hashPairs !== undefined ? hp.length >>> 1 : ev.blockHashes.length;
    this.removedFrom(ev.groupIdx, ev.locality, ev.medium, hp, 0, count);
  }

  /**
   * A BlockRemoved given field by field (deferred like applyDeferred: call flush() after the
   * batch): `count` engine hashes at `hp[2·hStart …]`; `events` consecutive BlockRemoved events
   * with these fields whose hashes these are (counted as that many when filtered).
   */
  removedFrom(groupIdx: number | null, locality: string | null, mediumName: string | null, hp: Uint32Array, hStart: number, count: number, events = 1): void {
    if (!this.accepted(groupIdx, null, locality)) return void (this.counters.filtered += events);
    const medium = normalizeMedium(mediumName);
    if (medium === null) return void (this.counters.unknownMedium += events);
    const mi = MEDIUM_INDEX[medium];
    if (this.goneCount > 0 && medium !== this.goneMedium) this.flush();
    this.goneMedium = medium;
    let nGone = this.goneCount;
    if (this.gone.length < 2 * (nGone + count)) {
      const grown = new Uint32Array(Math.max(2 * (nGone + count), 2 * this.gone.length));
      grown.set(this.gone.subarray(0, 2 * nGone));
      this.gone = grown;
    }
    const gone = this.gone;
    const held = this.map.count;
    for (let i = 0; i < count; i++) {
      const slot = this.map.find(hp[2 * (hStart + i)]!, hp[2 * (hStart + i) + 1]!);
      if (slot < 0 || (this.map.data[this.map.at(slot) + W_MEDIA]! & (1 << mi)) === 0) {
        this.counters.unknownRemovals++;
        continue;
      }
      const at = this.map.at(slot);
      const olo = this.map.data[at + W_LO]!;
      const ohi = this.map.data[at + W_HI]!;
      this.release(slot, mi);
      gone[2 * nGone] = olo;
      gone[2 * nGone + 1] = ohi;
      nGone++;
    }
    this.goneCount = nGone;
    if (!this.evicted && this.map.count < held) {
      this.evicted = true;
      this.onFirstEviction?.(held);
    }
  }

  /** Clear medium `mi` from the entry at `slot` (the sink's applier decides whether the index drops the herd hash). */
  private release(slot: number, mi: number): void {
    const v = this.map.data;
    const media = v[this.map.at(slot) + W_MEDIA]! & ~(1 << mi);
    if (media === 0) this.map.removeAt(slot);
    else v[this.map.at(slot) + W_MEDIA] = media;
  }

  private one = new Uint32Array(2);

  private dropEngineEntry(slot: number): void {
    const at = this.map.at(slot);
    const media = this.map.data[at + W_MEDIA]!;
    const olo = this.map.data[at + W_LO]!;
    const ohi = this.map.data[at + W_HI]!;
    for (let mi = 0; mi < 3; mi++) {
      if ((media & (1 << mi)) === 0) continue;
      // release() deletes the entry only when its last medium goes, i.e. on the last iteration.
      this.release(slot, mi);
      this.one[0] = olo;
      this.one[1] = ohi;
      this.sink.removed((["gpu", "cpu", "disk"] as const)[mi]!, this.one, 1);
    }
  }
}
