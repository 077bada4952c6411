// A least-recently-used map bounded in (estimated) bytes: the token memo and the hash-chain memo
// both hold prompt-sized values, so a count bound would not bound memory.

export class ByteLru<K, V> {
  private readonly map = new Map<K, { value: V; bytes: number }>();
  private total = 0;
  hits = 0;
  misses = 0;

  constructor(readonly maxBytes: number) {}

  get(key: K): V | undefined {
    const e = this.map.get(key);
    if (e === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    // Re-insert: Map order is recency order.
    this.map.delete(key);
    this.map.set(key, e);
    return e.value;
  }

  /** Store a value of `bytes`; one larger than the whole budget is not kept. */
  set(key: K, value: V, bytes: number): void {
    const old = this.map.get(key);
    if (old) {
      this.total -= old.bytes;
      this.map.delete(key);
    }
    if (bytes > this.maxBytes) return;
    this.map.set(key, { value, bytes });
    this.total += bytes;
    for (const [k, e] of this.map) {
      if (this.total <= this.maxBytes) break;
      this.map.delete(k);
      this.total -= e.bytes;
    }
  }

  get bytes(): number {
    return this.total;
  }

  get size(): number {
    return this.map.size;
  }
}
