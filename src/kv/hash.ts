// Dynamo-style block hashing, so the index never depends on an engine's own hash function,
// algorithm flag or PYTHONHASHSEED: engine events and incoming prompts are both hashed here from
// token ids, and engine hashes serve only as ids for removals and parents (docs/references.md#routers-1.5).
//
//   local_i = XXH3-64(u32le(tokens of block i), seed)     seed = 1337 (+ XXH3-64(lora, 0), wrapping)
//   seq_0   = local_0
//   seq_i   = XXH3-64(u64le(seq_{i-1}) ‖ u64le(local_i), 1337)
//
//   with a cache_salt: seq_0 = XXH3-64(u64le(salt_root) ‖ u64le(local_0), 1337)
//                     salt_root = XXH3-64("herd-cache-salt:" ‖ utf8(salt), 1337)
//
// The index keys on seq_i: one 64-bit value names a whole prefix, so "how many leading blocks does
// a worker hold" is a run of hash-table lookups. Only full blocks are hashed.
//
// LoRA and cache_salt are vLLM's block-hash "extra keys" (vllm/v1/core/kv_cache_utils.py,
// generate_block_hash_extra_keys: the LoRA name on every block, cache_salt on the first block
// only); a block computed under an adapter or a salt is a different block. Here the LoRA name seeds
// every local hash and the salt acts as a virtual parent of block 0, so both reach every later
// sequence hash through the chain, and an event whose parent is known inherits them from it.
import { xxh3_64 } from "./xxh3.ts";

export const XXH3_SEED = 1337n;
const M64 = (1n << 64n) - 1n;

if (new Uint8Array(new Uint32Array([1]).buffer)[0] !== 1) {
  // Typed arrays are used as the u32/u64 little-endian encoders below.
  throw new Error("herd kv hashing assumes a little-endian host");
}

/** Seed for a LoRA adapter's blocks; the base model (no name or "") uses 1337. */
export function loraSeed(lora?: string | null): bigint {
  if (!lora) return XXH3_SEED;
  return (XXH3_SEED + xxh3_64(new TextEncoder().encode(lora), 0n)) & M64;
}

/** The virtual parent of block 0 under a cache_salt; null without one (no salt or ""). */
export function saltRoot(salt?: string | null): bigint | null {
  if (!salt) return null;
  return Bun.hash.xxHash3(`herd-cache-salt:${salt}`, XXH3_SEED);
}

/** The hash inputs beside the token ids, as vLLM's extra keys name them. */
export interface HashExtras {
  /** LoRA adapter name (vLLM's lora_request.lora_name); null/"" = the base model. */
  lora?: string | null;
  /** The request's cache_salt; null/"" = none. */
  cacheSalt?: string | null;
}

const seedCache = new Map<string, bigint>();
function cachedSeed(lora?: string | null): bigint {
  if (!lora) return XXH3_SEED;
  let s = seedCache.get(lora);
  if (s === undefined) {
    s = loraSeed(lora);
    if (seedCache.size > 4096) seedCache.clear(); // bounded: adapter names are few, callers may not be
    seedCache.set(lora, s);
  }
  return s;
}

let scratch = new Uint32Array(16);
/** Local (position-free) hash of one block's tokens. */
export function localBlockHash(tokens: ArrayLike<number>, start: number, blockSize: number, seed: bigint = XXH3_SEED): bigint {
  const block = new Uint32Array(blockSize);
  for (let i = 0; i < blockSize; i++) block[i] = tokens[start + i]!;
  return hashSeeded(block, seed);
}

function hashSeeded(words: Uint32Array, seed: bigint): bigint {
  // Bun.hash.xxHash3 keeps only 32 bits of its seed; larger seeds take the BigInt implementation.
  return seed < 0x1_0000_0000n
    ? Bun.hash.xxHash3(words, seed)
    : xxh3_64(new Uint8Array(words.buffer, words.byteOffset, words.byteLength), seed);
}

// [parent, local] as u64le: the chaining input. Its u32 view reads a sequence hash's halves
// without BigInt arithmetic (a BigInt store into a typed array costs ~30 ns, a shift+Number ~100).
const pair = new BigUint64Array(2);
const pairU32 = new Uint32Array(pair.buffer);
const pairBytes = new Uint8Array(pair.buffer);
/** Chain a block's local hash onto its parent's sequence hash. */
export function nextSequenceHash(parent: bigint, local: bigint): bigint {
  pair[0] = parent;
  pair[1] = local;
  return Bun.hash.xxHash3(pairBytes, XXH3_SEED);
}

function checkBlockSize(blockSize: number): void {
  if (!(blockSize > 0) || !Number.isInteger(blockSize)) throw new RangeError(`block size must be a positive integer, got ${blockSize}`);
}

/**
 * The hot path of event ingest: sequence hashes of up to `maxBlocks` full blocks of `tokens`,
 * written as u32 halves `out[2i] = lo, out[2i + 1] = hi` (out must hold 2·blocks words). The chain
 * continues from the parent (parentLo, parentHi) when `hasParent`. BigInt appears only as the
 * native hash's return value: one per local hash, one per chained hash. Returns the block count.
 */
export function chainHashesU32(
  tokens: ArrayLike<number>,
  blockSize: number,
  hasParent: boolean,
  parentLo: number,
  parentHi: number,
  lora: string | null | undefined,
  maxBlocks: number,
  out: Uint32Array,
): number {
  checkBlockSize(blockSize);
  const seed = cachedSeed(lora);
  const native = seed < 0x1_0000_0000n;
  const n = Math.min(Math.floor(tokens.length / blockSize), maxBlocks);
  if (out.length < 2 * n) throw new RangeError(`output holds ${out.length >> 1} hashes, ${n} needed`);
  // Each block is copied into one reused u32 buffer (little-endian host) and hashed: no
  // allocation per block (a subarray view per block costs more than the 16-word copy).
  if (scratch.length !== blockSize) scratch = new Uint32Array(blockSize);
  const words = scratch;
  let chained = hasParent;
  pairU32[0] = parentLo;
  pairU32[1] = parentHi;
  for (let i = 0; i < n; i++) {
    const base = i * blockSize;
    for (let k = 0; k < blockSize; k++) words[k] = tokens[base + k]!;
    const local = native ? Bun.hash.xxHash3(words, seed) : xxh3_64(new Uint8Array(words.buffer, 0, words.byteLength), seed);
    if (chained) {
      pair[1] = local;
      pair[0] = Bun.hash.xxHash3(pairBytes, XXH3_SEED);
    } else {
      pair[0] = local;
      chained = true;
    }
    out[2 * i] = pairU32[0]!;
    out[2 * i + 1] = pairU32[1]!;
  }
  return n;
}

let chainOut = new Uint32Array(64);
const joinBuf = new BigUint64Array(1);
const joinU32 = new Uint32Array(joinBuf.buffer);

/**
 * Sequence hashes of the full blocks of `tokens`, continuing from `parent` (the sequence hash of
 * the block before tokens[0], or null at the start of a sequence). Token ids must be u32.
 */
export function chainHashes(
  tokens: ArrayLike<number>,
  blockSize: number,
  parent: bigint | null,
  lora?: string | null,
  maxBlocks = Infinity,
): bigint[] {
  checkBlockSize(blockSize);
  const n = Math.min(Math.floor(tokens.length / blockSize), maxBlocks);
  if (chainOut.length < 2 * n) chainOut = new Uint32Array(2 * n);
  let plo = 0;
  let phi = 0;
  if (parent !== null) {
    joinBuf[0] = parent;
    plo = joinU32[0]!;
    phi = joinU32[1]!;
  }
  chainHashesU32(tokens, blockSize, parent !== null, plo, phi, lora, n, chainOut);
  const out = new Array<bigint>(n);
  for (let i = 0; i < n; i++) {
    joinU32[0] = chainOut[2 * i]!;
    joinU32[1] = chainOut[2 * i + 1]!;
    out[i] = joinBuf[0]!;
  }
  return out;
}

/** Sequence hashes of a prompt's full blocks, as the index keys them (LoRA and cache_salt folded in). */
export function blockHashes(tokens: ArrayLike<number>, blockSize: number, extras: string | HashExtras = {}): bigint[] {
  const x: HashExtras = typeof extras === "string" ? { lora: extras } : extras;
  return chainHashes(tokens, blockSize, saltRoot(x.cacheSalt), x.lora);
}
