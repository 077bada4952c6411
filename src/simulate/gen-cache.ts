// A byte-bounded two-generation cache: hits in the young generation cost one Map lookup (an LRU's
// delete + re-insert per hit dominated long simulations); a hit in the old generation moves the entry
// up; when the young generation passes half the budget it becomes the old one and the old one is
// dropped. Memory stays within about `maxBytes`; recently used entries survive a rotation.
export class GenCache<K, V> {
  private young = new Map<K, { v: V; bytes: number }>();
  private old = new Map<K, { v: V; bytes: number }>();
  private youngBytes = 0;

  constructor(readonly maxBytes: number) {}

  get(key: K): V | undefined {
    const y = this.young.get(key);
    if (y !== undefined) return y.v;
    const o = this.old.get(key);
    if (o === undefined) return undefined;
    this.old.delete(key);
    this.put(key, o);
    return o.v;
  }

  set(key: K, v: V, bytes: number): void {
    if (bytes > this.maxBytes / 2) return;
    this.put(key, { v, bytes });
  }

  private put(key: K, e: { v: V; bytes: number }): void {
    this.young.set(key, e);
    this.youngBytes += e.bytes;
    if (this.youngBytes > this.maxBytes / 2) {
      this.old = this.young;
      this.young = new Map();
      this.youngBytes = 0;
    }
  }

  get size(): number {
    return this.young.size + this.old.size;
  }
}
