// The one place that defines the key herd's KV tier names a block by — what a simulated engine
// stores an offloaded KV block under on the tier's RESP server (src/engine/sim/offload.ts) and what
// the tier maps back to the block for the KV index (src/tier/tier-key.ts):
//
//   herd:<served model>:<16 lowercase hex digits>
//
// The hex number is herd's own sequence hash of the block (src/kv/hash.ts: token ids chained, LoRA
// and cache_salt folded in), NOT the engine's block hash. Like LMCache's chunk keys (token hashes),
// it does not depend on the engine's PYTHONHASHSEED, so every engine of the model on the host finds
// the blocks another one offloaded, and the router maps a key straight to the hash its index keys
// on (src/tier/tier-key.ts hashOfKey) without a per-engine translation table.
//
// It is the tier's format, but it lives here, on line 1: the sim engine (src/engine, line 3) writes
// it and the tier (src/tier, line 5) reads it, and the lowest folder both may import is protocol.

export const TIER_KEY_PREFIX = "herd:";

/** The tier key of a block of `model` whose herd sequence hash is `hash` (u64). */
export function tierKey(model: string, hash: bigint): string {
  return `${TIER_KEY_PREFIX}${model}:${hash.toString(16).padStart(16, "0")}`;
}

const HEX16 = /^[0-9a-f]{16}$/;

/** The model and herd hash a tier key names; undefined for any other key (e.g. LMCache's). */
export function parseTierKey(key: string): { model: string; hash: bigint } | undefined {
  if (!key.startsWith(TIER_KEY_PREFIX)) return undefined;
  const colon = key.lastIndexOf(":");
  if (colon <= TIER_KEY_PREFIX.length) return undefined;
  const hex = key.slice(colon + 1);
  if (!HEX16.test(hex)) return undefined;
  return { model: key.slice(TIER_KEY_PREFIX.length, colon), hash: BigInt(`0x${hex}`) };
}
