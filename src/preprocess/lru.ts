// A least-recently-used map bounded in (estimated) bytes: the token memo and the hash-chain memo
// both hold prompt-sized values, so a count bound would not bound memory.
//
// Recency is a doubly linked list beside the Map, so every operation is O(1). The earlier version
// evicted by iterating the Map from its start: JSC keeps deleted entries as holes until a rehash,
// so each new iterator walked past every hole left by earlier evictions and re-insertions. At a
// full memo that made one set() cost O(entries) (7 µs per set at 10k entries, 18 µs at 100k), and a
// request with 200,000 messages (800,000 pieces) spent tens of seconds of the event loop here.

interface Node<K, V> {
  key: K;
  value: V;
  bytes: number;
  prev: Node<K, V> | null;
  next: Node<K, V> | null;
}

export class ByteLru<K, V> {
  private readonly map = new Map<K, Node<K, V>>();
  /** Least recently used end. */
  private head: Node<K, V> | null = null;
  /** Most recently used end. */
  private tail: Node<K, V> | null = null;
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
    if (e !== this.tail) {
      this.unlink(e);
      this.append(e);
    }
    return e.value;
  }

  /** Store a value of `bytes`; one larger than the whole budget is not kept. */
  set(key: K, value: V, bytes: number): void {
    const old = this.map.get(key);
    if (old) {
      this.total -= old.bytes;
      this.unlink(old);
      this.map.delete(key);
    }
    if (bytes > this.maxBytes) return;
    const node: Node<K, V> = { key, value, bytes, prev: null, next: null };
    this.map.set(key, node);
    this.append(node);
    this.total += bytes;
    while (this.total > this.maxBytes && this.head !== null) {
      const lru = this.head;
      this.unlink(lru);
      this.map.delete(lru.key);
      this.total -= lru.bytes;
    }
  }

  get bytes(): number {
    return this.total;
  }

  get size(): number {
    return this.map.size;
  }

  private unlink(n: Node<K, V>): void {
    if (n.prev) n.prev.next = n.next;
    else this.head = n.next;
    if (n.next) n.next.prev = n.prev;
    else this.tail = n.prev;
    n.prev = n.next = null;
  }

  private append(n: Node<K, V>): void {
    n.prev = this.tail;
    n.next = null;
    if (this.tail) this.tail.next = n;
    else this.head = n;
    this.tail = n;
  }
}
