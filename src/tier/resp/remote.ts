// Peer fetch for the RESP server (issue 14): a local GET/EXISTS miss is looked up on other nodes'
// tiers through a `RemoteTierSource` (the daemon wires src/cluster/peer-tier.ts). One lookup per key
// at a time across clients; at most `max` keys are looked up at once, and a key over the bound, or
// one the lookup does not find, is a miss ($-1 / :0), never an error.

import type { TierStore } from "../store.ts";
import { type Reply, bulk, int } from "./commands.ts";
import { latin1 } from "./parser.ts";

export interface RemoteTierSource {
  /** False when there is nobody to ask (the command then runs synchronously, as without a source). */
  available(): boolean;
  /** The object or null (a miss); never rejects. */
  get(key: string): Promise<Uint8Array | null>;
}

export const REMOTE_LOOKUPS_MAX = 64;

export interface RemoteStats {
  remote_lookups: number;
  remote_hits: number;
  remote_misses: number;
  remote_rejected: number;
}

const NIL: Reply = { chunks: [new TextEncoder().encode("$-1\r\n")] };

export class RemoteLookups {
  /** Keys being looked up remotely, shared by every client that misses them meanwhile. */
  private readonly lookups = new Map<string, Promise<Uint8Array | null>>();

  constructor(
    private readonly store: TierStore,
    private readonly remote: RemoteTierSource | undefined,
    private readonly max: number,
    private readonly stats: RemoteStats,
  ) {}

  /**
   * GET/EXISTS with local misses and a remote source: a promise of the reply (never rejecting), or
   * null to run the command locally (no source, nothing missing, nobody to ask).
   */
  lookup(name: string, args: Uint8Array[]): Promise<Reply> | null {
    const remote = this.remote;
    if (!remote || (name !== "get" && name !== "exists") || args.length < 2 || (name === "get" && args.length !== 2)) return null;
    const keys = args.slice(1).map(latin1);
    const present = new Set(keys.filter((k) => this.store.has(k)));
    if (present.size === new Set(keys).size || !remote.available()) return null;
    const waits = new Map<string, Promise<Uint8Array | null>>();
    for (const k of keys) {
      if (present.has(k) || waits.has(k)) continue;
      const w = this.lookups.get(k) ?? this.start(remote, k);
      if (w) waits.set(k, w);
    }
    if (waits.size === 0) return null; // every missing key is over the bound: a plain miss
    const order = [...waits.keys()];
    return Promise.all(order.map((k) => waits.get(k)!)).then((found) => {
      const got = new Set(order.filter((_, i) => found[i] !== null));
      if (name === "get") {
        const v = found[0];
        return v ? bulk(v) : NIL;
      }
      return int(keys.filter((k) => present.has(k) || got.has(k)).length);
    });
  }

  private start(remote: RemoteTierSource, key: string): Promise<Uint8Array | null> | null {
    if (this.lookups.size >= this.max) {
      this.stats.remote_rejected++;
      return null;
    }
    this.stats.remote_lookups++;
    const w = remote
      .get(key)
      .catch(() => null)
      .then((v) => {
        this.lookups.delete(key);
        if (v) this.stats.remote_hits++;
        else this.stats.remote_misses++;
        return v;
      });
    this.lookups.set(key, w);
    return w;
  }
}
