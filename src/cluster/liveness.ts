// Heartbeat-counter failure detection shared by the file and peers backends. Each node bumps a
// counter in its own record; an observer notes, on ITS OWN monotonic clock, when a member's
// (incarnation, beat) last advanced. No two processes' clocks are ever compared, so clock skew
// between hosts cannot mark a live node dead (van Renesse et al., "A Gossip-Style Failure
// Detection Service", Middleware 1998, uses the same counter-plus-local-timeout rule).
import type { Clock } from "../core/clock.ts";
import type { Member, NodeMeta } from "./backend.ts";

export interface HeartbeatRecord {
  name: string;
  address: string;
  meta: NodeMeta;
  /** Raised on every restart (persisted), so a restarted node's beats count as new. */
  incarnation: number;
  beat: number;
  /** Set on a graceful leave: the member is dropped at once. */
  left?: boolean;
}

interface Entry {
  rec: HeartbeatRecord;
  advancedAt: number;
  dead: boolean;
}

const newer = (a: HeartbeatRecord, b: HeartbeatRecord) =>
  a.incarnation > b.incarnation || (a.incarnation === b.incarnation && a.beat > b.beat);

/** Bound on tracked members (a gossip flood of invented names cannot grow memory without limit). */
export const MEMBERS_MAX = 1024;

export class LivenessTable {
  private readonly entries = new Map<string, Entry>();

  constructor(
    private readonly clock: Clock,
    private readonly deadAfterMs: number,
    private readonly tombstoneMs = 60_000,
  ) {}

  /** Take a record seen directly or through gossip. Returns true when it is news. */
  observe(rec: HeartbeatRecord): boolean {
    const e = this.entries.get(rec.name);
    if (e && !newer(rec, e.rec)) return false;
    if (!e && this.entries.size >= MEMBERS_MAX) return false;
    this.entries.set(rec.name, { rec, advancedAt: this.clock.now(), dead: rec.left === true });
    return true;
  }

  /** Forget a member at once (its record file vanished: a graceful leave). */
  drop(name: string): boolean {
    return this.entries.delete(name);
  }

  /** Mark members whose beat stalled as dead; forget old tombstones. Returns true when the live set changed. */
  sweep(selfName: string): boolean {
    const now = this.clock.now();
    let changed = false;
    for (const [name, e] of this.entries) {
      if (name === selfName) continue;
      if (!e.dead && now - e.advancedAt > this.deadAfterMs) {
        e.dead = true;
        changed = true;
      }
      if (e.dead && now - e.advancedAt > this.tombstoneMs) this.entries.delete(name);
    }
    return changed;
  }

  /** Live records (for gossip: dead ones are not spread). */
  records(): HeartbeatRecord[] {
    return [...this.entries.values()].filter((e) => !e.dead).map((e) => e.rec);
  }

  get(name: string): HeartbeatRecord | undefined {
    const e = this.entries.get(name);
    return e && !e.dead ? e.rec : undefined;
  }

  /** When a live member's record last advanced (observer's clock); undefined if unknown or dead. */
  advancedAt(name: string): number | undefined {
    const e = this.entries.get(name);
    return e && !e.dead ? e.advancedAt : undefined;
  }

  members(): Member[] {
    const now = this.clock.now();
    const out: Member[] = [];
    for (const e of this.entries.values()) {
      if (e.dead) continue;
      const age = now - e.advancedAt;
      out.push({
        name: e.rec.name,
        address: e.rec.address,
        meta: e.rec.meta,
        state: age > this.deadAfterMs / 2 ? "suspect" : "alive",
        lastSeenMs: Math.round(age),
      });
    }
    return out.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** Names of live members, sorted (cheap change detection). */
  key(): string {
    return this.records().map((r) => `${r.name}@${r.address}#${r.incarnation}${JSON.stringify(r.meta)}`).sort().join(",");
  }
}
