// The map keys and event type tags the fast path (kv-events-fast.ts) knows, as bits and bytes:
// the names are vLLM's KV event fields (vllm/distributed/kv_events.py: BlockStored, BlockRemoved,
// AllBlocksCleared) as kv-events.ts, the reference decoder, reads them.
// Map event keys, as bits; the reference counts any other key as unknown (then this path refuses).
export const K_TYPE = 1 << 0;
export const K_HASHES = 1 << 1;
export const K_PARENT = 1 << 2;
export const K_TOKENS = 1 << 3;
export const K_BS = 1 << 4;
export const K_LORA_ID = 1 << 5;
export const K_MEDIUM = 1 << 6;
export const K_LORA = 1 << 7;
export const K_EXTRA = 1 << 8;
export const K_GROUP = 1 << 9;
export const K_KIND = 1 << 10;
export const K_WINDOW = 1 << 11;
export const K_LOCALITY = 1 << 12;
// Known keys the reference ignores: taken here when their value is a scalar.
export const K_OWNERSHIP = 1 << 13;
export const K_SESSION = 1 << 14;
export const K_VERSION = 1 << 15;
export const STORED_OK = (1 << 16) - 1;
export const REMOVED_OK = K_TYPE | K_HASHES | K_MEDIUM | K_GROUP | K_LOCALITY | K_OWNERSHIP | K_SESSION;

// Keys and type tags are matched on their bytes (no string made): by length, then byte for byte.
export const enc = new TextEncoder();
export const KEYS: [string, number][] = [
  ["type", K_TYPE], ["block_hashes", K_HASHES], ["parent_block_hash", K_PARENT], ["token_ids", K_TOKENS],
  ["block_size", K_BS], ["lora_id", K_LORA_ID], ["medium", K_MEDIUM], ["lora_name", K_LORA], ["extra_keys", K_EXTRA],
  ["group_idx", K_GROUP], ["kv_cache_spec_kind", K_KIND], ["kv_cache_spec_sliding_window", K_WINDOW],
  ["locality", K_LOCALITY], ["ownership", K_OWNERSHIP], ["session_id", K_SESSION], ["event_version", K_VERSION],
];
/** By fixstr length (< 32): the candidate keys' bytes and bits. */
export const KEYS_BY_LEN: { bytes: Uint8Array; bit: number }[][] = Array.from({ length: 32 }, () => []);
for (const [k, bit] of KEYS) KEYS_BY_LEN[k.length]!.push({ bytes: enc.encode(k), bit });
export const T_STORED = 1;
export const T_REMOVED = 2;
export const T_CLEARED = 3;
export const TAGS: { bytes: Uint8Array; tag: number }[] = [
  { bytes: enc.encode("BlockStored"), tag: T_STORED },
  { bytes: enc.encode("BlockRemoved"), tag: T_REMOVED },
  { bytes: enc.encode("AllBlocksCleared"), tag: T_CLEARED },
];
