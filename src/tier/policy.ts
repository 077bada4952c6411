// Eviction policies: PURE functions from (candidates, bytes needed, now) to victims. The catalog hands
// over the coldest candidates by last access (an index scan, so the cost does not grow with the
// number of objects); the policy picks among them. `lru` takes them in order; `frequency` scores a
// window of them by hits per unit of age (a hyperbolic-caching score: Blankstein et al., "Hyperbolic
// Caching", USENIX ATC 2017), so a block read often survives a block touched once slightly later.
// A new policy is one function plus one line in POLICIES.

export interface Candidate {
  key: string;
  /** Bytes the object holds in the tier being freed (its allocation). */
  bytes: number;
  createdMs: number;
  accessMs: number;
  hits: number;
}

export type EvictionPolicy = (candidates: readonly Candidate[], needBytes: number, nowMs: number) => string[];

/** Take candidates in the given (coldest-first) order until enough bytes are freed. */
export const lru: EvictionPolicy = (candidates, needBytes) => takeUntil(candidates, needBytes);

/** Lowest hits-per-age first; ties keep the catalog's LRU order (the sort is stable). */
export const frequency: EvictionPolicy = (candidates, needBytes, nowMs) => {
  const score = (c: Candidate) => (c.hits + 1) / Math.max(1, nowMs - c.createdMs);
  const ordered = [...candidates].sort((a, b) => score(a) - score(b));
  return takeUntil(ordered, needBytes);
};

function takeUntil(ordered: readonly Candidate[], needBytes: number): string[] {
  const out: string[] = [];
  let freed = 0;
  for (const c of ordered) {
    if (freed >= needBytes) break;
    out.push(c.key);
    freed += c.bytes;
  }
  return out;
}

export const POLICIES = { lru, frequency } as const;
export type PolicyName = keyof typeof POLICIES;
/** How many coldest objects a policy sees per eviction round (frequency needs a window to choose from). */
export const CANDIDATE_WINDOW = 64;
