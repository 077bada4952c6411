// The KV relay: other nodes' block residency in this node's index, so the kv policy on node a sees
// the prefix overlap of node c's workers. Engine ZeroMQ sockets stay on loopback; what travels is
// herd's own index updates (sequence hashes, already renamed by src/kv), over the peer API.
//
// Owner side: RelayIndex is the node's BlockIndex (the ingest fast path still sees a BlockIndex)
// that also records every update of its LOCAL workers — stored/removed (worker, medium, hashes) and
// cleared — in a bounded log with one per-node sequence number and an epoch drawn at start.
// Reader side: every KV_RELAY_POLL_MS a node asks each other node for the updates after the last
// sequence it applied (POST /cluster/v1/kv {epoch, seq}). A gap — the owner's log no longer reaches
// back that far, or a different epoch (the owner restarted) — is answered with a snapshot of the
// owner's local residency instead, which replaces everything held for that node's workers.
// Updates of remote workers are applied "quietly" (never recorded again): nothing is relayed twice.
import { wallClockMs } from "../core/clock.ts";
import type { Rng } from "../core/rng.ts";
import { BlockIndex } from "../kv/block-index.ts";
import type { IndexEvent, Medium } from "../kv/indexer.ts";
import { MEDIA } from "../kv/indexer.ts";
import { join64 } from "../kv/u64-table.ts";

/** Updates kept for readers that are behind; older ones are served as a snapshot. */
export const KV_RELAY_LOG_MAX = 4096;
/** Residencies in one snapshot (a larger index is sent truncated and logged). */
export const KV_RELAY_SNAPSHOT_MAX = 262_144;
export const KV_RELAY_POLL_MS = 250;

export type RelayEvent = { s: number; w: string; k: "stored" | "removed"; m: Medium; h: string[] } | { s: number; w: string; k: "cleared" };

export interface RelayReply {
  epoch: string;
  /** The owner's sequence number after this reply's updates. */
  seq: number;
  /** Present when the reader must start over: every local residency of the owner, per worker and medium. */
  snapshot?: { w: string; m: Medium; h: string[] }[];
  truncated?: boolean;
  events?: RelayEvent[];
}

interface Logged {
  s: number;
  w: string;
  k: "stored" | "removed" | "cleared";
  m?: Medium;
  pairs?: Uint32Array;
}

/** A fresh epoch per process start: the start time plus a draw (a fixed HERD_SEED alone would repeat). */
export function relayEpoch(rng: Rng): string {
  return `${Math.round(wallClockMs()).toString(36)}-${rng.int(2 ** 31).toString(36)}`;
}

const hex = (lo: number, hi: number) => join64(lo, hi).toString(16);

export class RelayIndex extends BlockIndex {
  readonly epoch: string;
  private seq = 0;
  private log: Logged[] = [];
  private head = 0; // index of the oldest entry in `log` (a ring once full)
  private quiet = 0;
  private readonly remote = new Set<string>();

  /** `epoch` must differ on every start of the node (a restart empties the log): see relayEpoch(). */
  constructor(epoch: string, initialCapacity?: number) {
    super(initialCapacity);
    this.epoch = epoch;
  }

  get sequence(): number {
    return this.seq;
  }

  private record(e: Omit<Logged, "s">): void {
    if (this.quiet > 0 || this.remote.has(e.w)) return;
    const entry = { ...e, s: ++this.seq };
    if (this.log.length < KV_RELAY_LOG_MAX) this.log.push(entry);
    else {
      this.log[this.head] = entry;
      this.head = (this.head + 1) % KV_RELAY_LOG_MAX;
    }
  }

  override applyPairs(worker: string, kind: "stored" | "removed", medium: Medium, pairs: Uint32Array, n: number, unchanged?: (i: number) => void): void {
    super.applyPairs(worker, kind, medium, pairs, n, unchanged);
    this.record({ w: worker, k: kind, m: medium, pairs: pairs.slice(0, 2 * n) });
  }

  override apply(worker: string, ev: IndexEvent, unchanged?: (i: number) => void): void {
    super.apply(worker, ev, unchanged); // stored/removed arrive in applyPairs and are recorded there
    if (ev.kind === "cleared") this.record({ w: worker, k: "cleared" });
  }

  override clearWorker(worker: string): void {
    super.clearWorker(worker);
    this.record({ w: worker, k: "cleared" });
  }

  override removeWorker(worker: string): void {
    super.removeWorker(worker);
    this.record({ w: worker, k: "cleared" });
  }

  /** Apply another node's update for one of its workers (not recorded, never relayed onward). */
  applyRemote(worker: string, ev: IndexEvent): void {
    this.remote.add(worker);
    this.quiet++;
    try {
      super.apply(worker, ev);
    } finally {
      this.quiet--;
    }
  }

  /** Forget a remote worker (its node left, or it is no longer pooled). */
  removeRemote(worker: string): void {
    this.quiet++;
    try {
      super.removeWorker(worker);
    } finally {
      this.quiet--;
      this.remote.delete(worker);
    }
  }

  /** What a reader that has applied up to `seq` of `epoch` needs next. */
  since(epoch: string, seq: number): RelayReply {
    const oldest = this.log.length === 0 ? this.seq + 1 : this.log[this.head]!.s;
    if (epoch !== this.epoch || seq > this.seq || seq < oldest - 1) return this.snapshot();
    const events: RelayEvent[] = [];
    for (let i = 0; i < this.log.length; i++) {
      const e = this.log[(this.head + i) % this.log.length]!;
      if (e.s <= seq) continue;
      if (e.k === "cleared") events.push({ s: e.s, w: e.w, k: "cleared" });
      else {
        const h: string[] = [];
        for (let j = 0; j < e.pairs!.length; j += 2) h.push(hex(e.pairs![j]!, e.pairs![j + 1]!));
        events.push({ s: e.s, w: e.w, k: e.k, m: e.m!, h });
      }
    }
    return { epoch: this.epoch, seq: this.seq, events };
  }

  private snapshot(): RelayReply {
    const groups = new Map<string, { w: string; m: Medium; h: string[] }>();
    let n = 0;
    let truncated = false;
    this.forEachEntry((w, hash, m) => {
      if (this.remote.has(w)) return;
      if (n >= KV_RELAY_SNAPSHOT_MAX) return void (truncated = true);
      n++;
      const key = `${m}\u0000${w}`;
      let g = groups.get(key);
      if (!g) groups.set(key, (g = { w, m, h: [] }));
      g.h.push(hash.toString(16));
    });
    return { epoch: this.epoch, seq: this.seq, snapshot: [...groups.values()], ...(truncated ? { truncated } : {}) };
  }
}

const isMedium = (m: unknown): m is Medium => (MEDIA as readonly unknown[]).includes(m);
const toHashes = (h: unknown): bigint[] | null => {
  if (!Array.isArray(h)) return null;
  const out: bigint[] = [];
  for (const x of h) {
    if (typeof x !== "string" || !/^[0-9a-f]{1,16}$/.test(x)) return null;
    out.push(BigInt(`0x${x}`));
  }
  return out;
};

/** What this node holds of one other node's relay: its epoch and the last sequence applied. */
export interface RelayCursor {
  epoch: string;
  seq: number;
}

/**
 * Apply one reply from `node` to `index`, for the workers `pooled` says belong to it. Returns the
 * new cursor, or a reset cursor (next poll asks for a snapshot) when the reply has a gap.
 */
export function applyRelayReply(index: RelayIndex, cursor: RelayCursor, reply: RelayReply, pooled: (worker: string) => boolean, known: Set<string>): RelayCursor {
  if (typeof reply?.epoch !== "string" || !Number.isSafeInteger(reply.seq)) return { epoch: "", seq: 0 };
  if (Array.isArray(reply.snapshot)) {
    for (const w of known) index.removeRemote(w);
    known.clear();
    for (const g of reply.snapshot) {
      const hashes = toHashes(g?.h);
      if (!hashes || !isMedium(g.m) || typeof g.w !== "string" || !pooled(g.w)) continue;
      known.add(g.w);
      index.applyRemote(g.w, { kind: "stored", medium: g.m, hashes });
    }
    return { epoch: reply.epoch, seq: reply.seq };
  }
  if (reply.epoch !== cursor.epoch) return { epoch: "", seq: 0 };
  let seq = cursor.seq;
  for (const e of Array.isArray(reply.events) ? reply.events : []) {
    if (!e || e.s !== seq + 1) return { epoch: "", seq: 0 }; // gap: resync from a snapshot
    seq = e.s;
    if (typeof e.w !== "string" || !pooled(e.w)) continue;
    known.add(e.w);
    if (e.k === "cleared") index.applyRemote(e.w, { kind: "cleared" });
    else {
      const hashes = toHashes(e.h);
      if (hashes && isMedium(e.m) && (e.k === "stored" || e.k === "removed")) index.applyRemote(e.w, { kind: e.k, medium: e.m, hashes });
    }
  }
  return { epoch: reply.epoch, seq };
}
