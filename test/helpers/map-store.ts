// An in-process TierStore (a Map), the reference behaviour in the TierStore conformance suite
// (test/tier/store.test.ts) and the store behind fake peers and RESP servers in tests.
import type { TierStore } from "../../src/tier/store.ts";

export class MapStore implements TierStore {
  private readonly m = new Map<string, Uint8Array>();
  constructor(private readonly maxValueBytes = Number.MAX_SAFE_INTEGER) {}
  put(key: string, data: Uint8Array): boolean {
    if (data.length > this.maxValueBytes) return false;
    this.m.set(key, data.slice());
    return true;
  }
  get(key: string): Uint8Array | undefined {
    return this.m.get(key);
  }
  has(key: string): boolean {
    return this.m.has(key);
  }
  delete(key: string): boolean {
    return this.m.delete(key);
  }
  list(limit = Number.MAX_SAFE_INTEGER): string[] {
    return [...this.m.keys()].sort().slice(0, limit);
  }
}
