// The fast path's output: one batch's events as reused typed-array columns (readKvOps in
// kv-events-fast.ts fills them; src/kv's ingest applies them). No JS object per event.
export const OP_STORED = 0;
export const OP_REMOVED = 1;
export const OP_CLEARED = 2;

/** One batch's events as columns; event i's hashes are `hashes[2·hStart[i] …]` (u32 halves). */
export class KvOps {
  ts = 0;
  /** Events in the batch. */
  n = 0;
  kind = new Uint8Array(16);
  hStart = new Int32Array(16);
  hCount = new Int32Array(16);
  tStart = new Int32Array(16);
  tCount = new Int32Array(16);
  blockSize = new Int32Array(16);
  hasParent = new Uint8Array(16);
  parentLo = new Uint32Array(16);
  parentHi = new Uint32Array(16);
  medium: (string | null)[] = [];
  lora: (string | null)[] = [];
  group: (number | null)[] = [];
  specKind: (string | null)[] = [];
  locality: (string | null)[] = [];
  /** Block hashes of all events, u32 halves: `[2j]` low, `[2j + 1]` high. */
  hashes = new Uint32Array(256);
  nHashes = 0;
  /** Token ids of all stores, concatenated. */
  tokens = new Uint32Array(4096);
  nTokens = 0;

  grow(events: number): void {
    if (events <= this.kind.length) return;
    const n = Math.max(events, 2 * this.kind.length);
    const u8 = (a: Uint8Array) => {
      const b = new Uint8Array(n);
      b.set(a);
      return b;
    };
    const i32 = (a: Int32Array) => {
      const b = new Int32Array(n);
      b.set(a);
      return b;
    };
    const u32 = (a: Uint32Array) => {
      const b = new Uint32Array(n);
      b.set(a);
      return b;
    };
    this.kind = u8(this.kind);
    this.hasParent = u8(this.hasParent);
    this.hStart = i32(this.hStart);
    this.hCount = i32(this.hCount);
    this.tStart = i32(this.tStart);
    this.tCount = i32(this.tCount);
    this.blockSize = i32(this.blockSize);
    this.parentLo = u32(this.parentLo);
    this.parentHi = u32(this.parentHi);
  }
}
