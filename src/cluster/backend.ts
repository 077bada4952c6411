// The discovery seam: every backend (file, peers, etcd) implements DiscoveryBackend, and one
// conformance suite (test/cluster/conformance.test.ts) runs over all of them with real processes.
// A backend answers two questions: who is in the cluster, and who leads in which term.

/** Small, flat metadata a node publishes about itself (version, GPUs, peer API address, …). */
export type NodeMeta = Record<string, string | number | boolean>;

/** This node, as it registers itself. */
export interface SelfInfo {
  /** Stable node name (`node.name`); unique in the cluster. */
  name: string;
  /** host:port where other nodes reach this node's peer API. */
  address: string;
  meta: NodeMeta;
}

export type MemberState = "alive" | "suspect" | "dead";

/** One member as this node sees it. */
export interface Member {
  name: string;
  address: string;
  meta: NodeMeta;
  state: MemberState;
  /** Milliseconds since this node last heard (directly or through others) that the member lives. */
  lastSeenMs: number;
}

/**
 * The leadership view. `term` increases with every new leadership grant (file: term file number;
 * peers: Raft term; etcd: the leader key's create revision), so it is the fencing token every
 * leader duty must carry: a host that has seen term N refuses anything from a term below N.
 */
export interface LeaderView {
  /** Name of the leader this node knows of, or null when there is none (or it is unknown). */
  leader: string | null;
  term: number;
  /** True only while this node holds a live grant for `term` (never from a stale view). */
  self: boolean;
}

export type ClusterEvent =
  | { kind: "members"; members: Member[] }
  | { kind: "leader"; view: LeaderView };

export interface DiscoveryBackend {
  /** "file" | "peers" | "etcd". */
  readonly kind: string;
  /** Register this node and start heartbeats and watches. Rejects when registration is impossible. */
  start(self: SelfInfo): Promise<void>;
  /** Replace this node's metadata (it reaches the others with the next heartbeat). */
  setMeta(meta: NodeMeta): void;
  /** Current membership, including this node; dead members are dropped once the bound passes. */
  members(): Member[];
  /** Subscribe to membership and leadership changes; returns the unsubscribe function. */
  watch(fn: (e: ClusterEvent) => void): () => void;
  /** Become eligible for leadership (campaigning runs in the background until resign/close). */
  campaign(): void;
  /** Give up leadership (if held) and stop campaigning. */
  resign(): Promise<void>;
  /** Current leader and term as this node knows them. */
  leader(): LeaderView;
  /** Leave the cluster (best effort: deregister, release a held lease) and stop every timer. */
  close(): Promise<void>;
  /**
   * True while this node's view may be out of date because it cannot reach what decides it (etcd,
   * or a quorum of voters). Absent: ClusterService judges from the leader view (no leader known).
   */
  stale?(): boolean;
}

/** Timing shared by the heartbeat-based backends (file, peers). */
export interface HeartbeatTiming {
  /** How often a node refreshes its own record / gossips. */
  heartbeat_ms: number;
  /** A member whose heartbeat has not advanced for this long is dead and leaves the view (half of it: suspect, still listed). */
  dead_after_ms: number;
}

/** Defaults chosen so a dead node leaves every view within 5 s (issue 12): 3 s + one heartbeat + one poll. */
export const DEFAULT_TIMING: HeartbeatTiming = { heartbeat_ms: 500, dead_after_ms: 3000 };

/** Fan out events to listeners; a throwing listener does not stop the others. */
export class Emitter {
  private readonly fns = new Set<(e: ClusterEvent) => void>();
  on(fn: (e: ClusterEvent) => void): () => void {
    this.fns.add(fn);
    return () => void this.fns.delete(fn);
  }
  emit(e: ClusterEvent): void {
    for (const fn of this.fns) {
      try {
        fn(e);
      } catch {
        // a listener's bug must not stop membership or election
      }
    }
  }
}

export const sameView = (a: LeaderView, b: LeaderView) => a.leader === b.leader && a.term === b.term && a.self === b.self;
