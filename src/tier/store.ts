// The TierStore seam: a key → bytes store. Implementation: KvTier (tier.ts: shm CPU tier, SSD tier,
// or both, over the SQLite catalog). One conformance suite, test/tier/store.test.ts, runs over it and
// over the tests' in-process reference store (test/helpers/map-store.ts).

export interface TierStore {
  /** Store a value (replacing any previous one). False when the value can never fit this store. */
  put(key: string, data: Uint8Array, model?: string): boolean;
  /**
   * The value, or undefined on a miss (absent, or its data failed the checksum and was dropped).
   * The bytes may be a view into shared memory, valid until the next call on this store: copy to keep.
   */
  get(key: string): Uint8Array | undefined;
  has(key: string): boolean;
  /** True when something was deleted. */
  delete(key: string): boolean;
  /** Keys in byte order, at most `limit`. */
  list(limit?: number): string[];
  /**
   * Optional: a location of `size` bytes for `key`'s next value, filled by the caller through `bytes`
   * and stored by `commit()` (as put would, replacing any previous value), or given back by `abort()`.
   * Undefined when the store prefers put() for this value. Exactly one of commit/abort must follow.
   */
  reserve?(key: string, size: number): PutSlot | undefined;
}

/** A value being written in place (TierStore.reserve). */
export interface PutSlot {
  readonly bytes: Uint8Array;
  /** Store the value (false if the slot was already closed). */
  commit(): boolean;
  abort(): void;
}

/** Model name from an LMCache key (`model@world_size@worker_id@hash@dtype`, the older `fmt@model@…`,
 * or the MP adapter's `model@rank@group@hash`); "" when the key is not one (quota-free). */
export function modelOfKey(key: string): string {
  const parts = key.split("@");
  if (parts.length < 4) return "";
  return parts[0] === "vllm" || parts[0] === "huggingface" ? (parts[1] ?? "") : (parts[0] ?? "");
}
