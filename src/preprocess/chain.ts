// Block hashes memoised along the prompt's pieces. Hashing a 32k-token prompt's 2,000 blocks costs
// about as much as everything else in a warm routing decision (Dynamo cut 25 ms to 3 ms by hashing
// once and reusing, docs/references.md#routers-1.10), and prompts that share a prefix share their first pieces.
// So the state after each piece — token count, last full block's sequence hash, the partial
// block's tokens — is cached under a key naming the whole piece sequence so far; a warm prompt
// resumes from the deepest known state and hashes only what follows.
//
// A state holds only the hashes its own piece completed and points at its parent; `collect` walks
// the chain. (An evicted parent stays alive while a cached child points at it, so memory can exceed
// the byte budget by at most one chain's worth of states.)
import { chainHashes, nextSequenceHash, saltRoot } from "../kv/hash.ts";

export interface ChainState {
  /** Names the piece sequence so far (and the block size and LoRA, through the root key). */
  readonly key: bigint;
  readonly tokens: number;
  /** Sequence hash of the last full block; null before the first. */
  readonly last: bigint | null;
  /** Tokens after the last full block (fewer than a block). */
  readonly tail: Uint32Array;
  /**
   * Full blocks completed by this piece. A typed array, not bigint[]: the memo holds up to millions
   * of hashes for a long time, and a million heap bigints make every major GC mark a million objects.
   */
  readonly hashes: BigUint64Array;
  readonly parent: ChainState | null;
  /** Full blocks so far, including the parents'. */
  readonly blocks: number;
}

const EMPTY = new Uint32Array(0);
const NO_HASHES = new BigUint64Array(0);

/**
 * The state before a prompt's first token. A cache_salt is block 0's virtual parent (kv/hash.ts), so
 * it sits in `last`; LoRA and salt both enter the key, so memoised states never cross namespaces.
 */
export function rootState(blockSize: number, lora: string | undefined, cacheSalt?: string | null): ChainState {
  const key = Bun.hash.xxHash3(`herd-chain:${blockSize}:${JSON.stringify([lora ?? "", cacheSalt ?? ""])}`);
  return { key, tokens: 0, last: saltRoot(cacheSalt), tail: EMPTY, hashes: NO_HASHES, parent: null, blocks: 0 };
}

/** The key of `state` extended by a piece whose own key is `pieceKey`. */
export function childKey(state: ChainState, pieceKey: bigint): bigint {
  return nextSequenceHash(state.key, pieceKey);
}

/** One piece's hashing step: pure, so the tokenizer worker runs the same code (worker.ts). */
export interface HashStep {
  hashes: BigUint64Array;
  tail: Uint32Array;
  last: bigint | null;
}

export function hashStep(last: bigint | null, tail: Uint32Array, ids: ArrayLike<number>, blockSize: number, lora?: string): HashStep {
  const tokens = new Uint32Array(tail.length + ids.length);
  tokens.set(tail, 0);
  for (let i = 0; i < ids.length; i++) tokens[tail.length + i] = ids[i]!;
  const hashes = chainHashes(tokens, blockSize, last, lora);
  return {
    hashes: BigUint64Array.from(hashes),
    tail: tokens.slice(hashes.length * blockSize),
    last: hashes.length > 0 ? hashes[hashes.length - 1]! : last,
  };
}

/** Extend a state by a piece whose hashing step is done. */
export function extendWith(state: ChainState, key: bigint, tokens: number, step: HashStep): ChainState {
  return {
    key,
    tokens: state.tokens + tokens,
    last: step.last,
    tail: step.tail,
    hashes: step.hashes,
    parent: state,
    blocks: state.blocks + step.hashes.length,
  };
}

/** Extend a state by a piece's token ids, hashing the blocks they complete. */
export function extend(state: ChainState, key: bigint, ids: ArrayLike<number>, blockSize: number, lora?: string): ChainState {
  return extendWith(state, key, ids.length, hashStep(state.last, state.tail, ids, blockSize, lora));
}

/** Every full block's sequence hash from the root to `state`, in order. */
export function collect(state: ChainState): bigint[] {
  const out = new Array<bigint>(state.blocks);
  let end = state.blocks;
  for (let s: ChainState | null = state; s !== null && end > 0; s = s.parent) {
    const hs = s.hashes;
    end -= hs.length;
    for (let i = 0; i < hs.length; i++) out[end + i] = hs[i]!;
  }
  return out;
}

/** Approximate bytes a state keeps alive. */
export function stateBytes(s: ChainState): number {
  return 160 + s.hashes.byteLength + s.tail.byteLength;
}
