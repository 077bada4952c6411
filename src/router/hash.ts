// A small, fast, well-mixed 32-bit string hash for the session ring: FNV-1a over UTF-16 code
// units, then murmur3's fmix32 finalizer so nearby keys ("w#1", "w#2") land far apart on the ring.
// Stable across processes and runs (no seed), so every herd replica builds the same ring.

export function hash32(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return fmix32(h);
}

export function fmix32(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}
