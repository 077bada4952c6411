// Routing integration: what this host's tier holds, as KV index events with medium `cpu` (CPU tier)
// or `disk` (SSD tier) for every worker of this host, the way vLLM's offloading connector reports its
// own CPU/storage tiers in BlockStored/BlockRemoved. The router then credits a prefix held in the tier
// (kv/indexer.ts Overlap.cpu/.disk) when choosing between hosts.
//
// Which block a key stands for is the engine's business (LMCache keys carry LMCache's chunk hash, the
// sim engine's keys herd's own block hash), so the caller injects `hashOfKey`; keys it cannot map
// are not indexed.

import type { IndexEvent, KvIndex, Medium } from "../kv/indexer.ts";
import type { TierName } from "./medium.ts";

/** A change to what the tier holds (KvTier's `onChange`). */
export interface TierChange {
  kind: "stored" | "removed";
  tier: TierName;
  key: string;
}

export const TIER_MEDIUM: Record<TierName, Medium> = { cpu: "cpu", ssd: "disk" };

/** Pure: the index events one change means, per worker of this host. */
export function indexEventsFor(change: TierChange, hashOfKey: (key: string) => bigint | undefined, workers: readonly string[]): [string, IndexEvent][] {
  const h = hashOfKey(change.key);
  if (h === undefined) return [];
  const ev: IndexEvent = { kind: change.kind, medium: TIER_MEDIUM[change.tier], hashes: [h] };
  return workers.map((w) => [w, ev]);
}

