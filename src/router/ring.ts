// Consistent-hash ring with virtual nodes. Each worker id owns `virtualNodes` points at
// hash32(`${id}#${v}`); a key belongs to the first point clockwise from hash32(key). A point's
// position depends only on its worker's id, so removing a worker moves only the keys it owned and
// adding one takes keys only for itself.
import { hash32 } from "./hash.ts";

export class HashRing {
  /** Sorted point positions. */
  private readonly points: Uint32Array;
  /** owners[i] = index into ids of the worker owning points[i]. */
  private readonly owners: Uint16Array;

  constructor(
    readonly ids: readonly string[],
    virtualNodes: number,
  ) {
    if (ids.length > 65535) throw new RangeError("HashRing: more than 65535 workers");
    const v = Math.max(1, Math.floor(virtualNodes));
    const raw: Array<[number, number]> = [];
    ids.forEach((id, owner) => {
      for (let k = 0; k < v; k++) raw.push([hash32(`${id}#${k}`), owner]);
    });
    // Equal positions (rare 32-bit collisions) are ordered by id so every replica agrees.
    raw.sort((a, b) => a[0] - b[0] || (ids[a[1]]! < ids[b[1]]! ? -1 : 1));
    this.points = Uint32Array.from(raw, (p) => p[0]);
    this.owners = Uint16Array.from(raw, (p) => p[1]);
  }

  /**
   * Worker indices (into `ids`) in clockwise order from the key's position, each once: [0] is the
   * key's home worker, [1] where it spills when the home is over capacity, and so on.
   * Stops after `limit` distinct workers.
   */
  walk(key: string, limit = this.ids.length): number[] {
    const out: number[] = [];
    const n = this.points.length;
    if (n === 0) return out;
    const seen = new Uint8Array(this.ids.length);
    let i = lowerBound(this.points, hash32(key));
    for (let steps = 0; steps < n && out.length < limit; steps++, i++) {
      const owner = this.owners[i % n]!;
      if (seen[owner] === 0) {
        seen[owner] = 1;
        out.push(owner);
      }
    }
    return out;
  }
}

function lowerBound(a: Uint32Array, x: number): number {
  let lo = 0;
  let hi = a.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
