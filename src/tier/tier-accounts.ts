// What each tier and each model holds (tier.ts): objects per tier, keyCharge() of the keys per tier
// (counted against its capacity with the media's bytes), and charged bytes per model (quotas).
// Kept in step with the catalog's rows by the tier at each change; rebuilt from them on open.

import type { Row } from "./catalog.ts";
import type { TierName } from "./medium.ts";

export interface TierCounters {
  hits: number;
  misses: number;
  evictions: number;
  objects: number;
}

/** Key bytes that ride in an object's allocation overhead; beyond them a key is charged to its tier
 * (issue 22 row 9: keys cost catalog memory, so 1 KiB keys on 64-byte values must not be free). */
export const KEY_FREE_BYTES = 64;
export const keyCharge = (key: string): number => Math.max(0, key.length - KEY_FREE_BYTES);

const zero = (): TierCounters => ({ hits: 0, misses: 0, evictions: 0, objects: 0 });

export class TierAccounts {
  readonly counters: Record<TierName, TierCounters> = { cpu: zero(), ssd: zero() };
  readonly keyBytes: Record<TierName, number> = { cpu: 0, ssd: 0 };
  private readonly modelUsed = new Map<string, number>();

  /** A row now exists in `row.tier`. */
  added(row: Pick<Row, "key" | "tier" | "model" | "charged">, kc = keyCharge(row.key)): void {
    this.counters[row.tier].objects++;
    this.keyBytes[row.tier] += kc;
    this.addModel(row.model, row.charged);
  }

  /** A row is gone from `row.tier`. */
  removed(row: Pick<Row, "key" | "tier" | "model" | "charged">): void {
    this.counters[row.tier].objects--;
    this.keyBytes[row.tier] -= keyCharge(row.key);
    this.addModel(row.model, -row.charged);
  }

  /** A row moved between tiers (demotion, promotion), now charged `charged`. */
  moved(row: Pick<Row, "key" | "tier" | "model" | "charged">, to: TierName, charged: number): void {
    this.removed(row);
    this.added({ key: row.key, tier: to, model: row.model, charged });
  }

  addModel(model: string, delta: number): void {
    this.modelUsed.set(model, (this.modelUsed.get(model) ?? 0) + delta);
  }

  modelBytes(model: string): number {
    return this.modelUsed.get(model) ?? 0;
  }
}
