// The router side of herd's tier keys (format defined once, in src/protocol/tier-key.ts, the lowest
// folder the sim engine that writes them and this folder both import:
// `herd:<model>:<16 hex digits of herd's sequence hash>`): map a key back to the block hash the KV
// index keys on, and the tier's `onChange` hook that tells the index what this host's tier holds.
//
// A block in this host's tier is loadable by every engine of its model on this host (they share the
// RESP server), so a stored key credits all of them with medium cpu/disk; engines of other models
// are not credited (their prompts would hash alike only by coincidence, and they cannot use it).

import type { KvIndex } from "../kv/indexer.ts";
import { parseTierKey } from "../protocol/tier-key.ts";
import { type TierChange, indexEventsFor } from "./index-feed.ts";

/** Pure: herd's block hash named by a tier key; undefined for keys of another format (LMCache's). */
export function hashOfKey(key: string): bigint | undefined {
  return parseTierKey(key)?.hash;
}

/**
 * KvTier's `onChange` (TierServiceDeps.onChange): each stored/removed key becomes an index event with
 * medium cpu (CPU tier) or disk (SSD tier) for every worker `workersOf(model)` names on this host.
 */
export function tierIndexFeed(index: KvIndex, workersOf: (model: string) => readonly string[]): (c: TierChange) => void {
  return (c) => {
    const parsed = parseTierKey(c.key);
    if (parsed === undefined) return;
    for (const [w, ev] of indexEventsFor(c, () => parsed.hash, workersOf(parsed.model))) index.apply(w, ev);
  };
}

/** At start (or after the index was cleared): index every sim-engine key the catalog holds (`catalog.rows()`). */
export function tierIndexReplay(index: KvIndex, rows: Iterable<{ key: string; tier: TierChange["tier"] }>, workersOf: (model: string) => readonly string[]): void {
  const feed = tierIndexFeed(index, workersOf);
  for (const r of rows) feed({ kind: "stored", tier: r.tier, key: r.key });
}
