// Which of a prompt's block hashes the router's own bookkeeping tracks (prefix memory, active
// blocks): every one of the first EXACT_BLOCKS, then every STRIDE-th (Dynamo's
// --router-active-sequence-stride, docs/references.md#routers-1.3). A block's sequence hash names its whole prefix,
// so a tracked hash at position p stands for blocks 0..p; short prompts stay exact while a
// 32k-token prompt's 2,000 blocks cost ~300 map entries instead of 2,000 (a cold prompt's
// bookkeeping otherwise takes milliseconds of event loop).

export const EXACT_BLOCKS = 64;
export const STRIDE = 8;

/** Positions tracked for a prompt of n full blocks, ascending. */
export function trackedPositions(n: number): number[] {
  const out: number[] = [];
  for (let i = 0; i < Math.min(n, EXACT_BLOCKS); i++) out.push(i);
  for (let i = EXACT_BLOCKS + STRIDE - 1; i < n; i += STRIDE) out.push(i);
  return out;
}

/**
 * mapKey of each tracked hash (the hashes at trackedPositions), computed once per prompt: the
 * route (active and predicted overlaps, the predicted record) and the booking all ask for the same
 * array, so the keys are remembered per array object (a WeakMap: they go with the prompt). The
 * result is shared: callers must not modify it. A prompt array changed in place since (another
 * length) is recomputed.
 */
export function trackedKeys(hashes: readonly bigint[]): readonly number[] {
  const hit = keysOf.get(hashes);
  if (hit !== undefined && hit.n === hashes.length) return hit.keys;
  const n = hashes.length;
  const keys: number[] = [];
  const head = Math.min(n, EXACT_BLOCKS);
  for (let i = 0; i < head; i++) keys.push(mapKey(hashes[i]!));
  for (let i = EXACT_BLOCKS + STRIDE - 1; i < n; i += STRIDE) keys.push(mapKey(hashes[i]!));
  keysOf.set(hashes, { n, keys });
  return keys;
}
const keysOf = new WeakMap<readonly bigint[], { n: number; keys: readonly number[] }>();

/** Blocks the i-th tracked hash stands for beyond the previous one (1 in the exact head, else STRIDE). */
export function trackedWeight(i: number): number {
  return i < EXACT_BLOCKS ? 1 : STRIDE;
}

/** Leading blocks covered when the first `k` tracked positions match. */
export function blocksCovered(k: number): number {
  if (k <= EXACT_BLOCKS) return k;
  return EXACT_BLOCKS + (k - EXACT_BLOCKS) * STRIDE;
}

const u64 = new BigUint64Array(1);
const u32 = new Uint32Array(u64.buffer);
/**
 * A block hash as a Map key: its low 52 bits as a number. Numbers are not heap cells, so maps of
 * hundreds of thousands of remembered blocks add nothing for the GC to mark (a bigint key is one
 * heap object each); two blocks sharing 52 bits is a 2^-52-per-pair event, and costs at most a
 * wrongly credited block.
 */
export function mapKey(h: bigint): number {
  u64[0] = h;
  return u32[0]! + (u32[1]! & 0xfffff) * 4294967296;
}
