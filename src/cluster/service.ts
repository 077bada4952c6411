// ClusterService: the imperative shell the daemon starts and stops. It loads the token, enforces the
// "no token → loopback only" rule, builds the configured backend (registry.ts), registers this node
// and campaigns. The peer API it needs is clusterRoutes(service) (routes.ts), mounted by the caller.
import { join } from "node:path";
import type { Clock } from "../core/clock.ts";
import { HerdError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Rng } from "../core/rng.ts";
import type { Config } from "../config/types.ts";
import { PeerAuth, isLoopbackAddress, loadToken } from "./auth.ts";
import type { ClusterEvent, DiscoveryBackend, HeartbeatTiming, LeaderView, Member, NodeMeta } from "./backend.ts";
import type { ElectionTiming } from "./election.ts";
import { createBackend } from "./registry.ts";
import { StateStore } from "./state.ts";
import type { PeerTransport } from "./tls.ts";

export interface ClusterServiceOptions {
  config: Pick<Config, "node" | "cluster">;
  /** host:port where the other nodes reach this node's peer API (node.advertise + listener port). */
  address: string;
  clock: Clock;
  rng: Rng;
  log: Logger;
  meta?: NodeMeta;
  /** Whether this node seeks leadership (default true). */
  campaign?: boolean;
  /** Test seam: the address to dial for a member's address (partition proxies). */
  dial?: (address: string) => string;
  /** Test seams for timing (defaults: backend.ts DEFAULT_TIMING, election.ts DEFAULT_ELECTION). */
  timing?: HeartbeatTiming;
  election?: ElectionTiming;
  fetch?: typeof fetch;
  /** Peer API calls (scheme, TLS identity: tls.ts); default plain HTTP with `fetch`. */
  transport?: PeerTransport;
}

/** What GET /cluster/v1/view (and later /admin/cluster) shows. */
export interface ClusterView {
  node: string;
  discovery: string;
  leader: string | null;
  term: number;
  is_leader: boolean;
  /**
   * This node cannot reach what decides the view (etcd, or a quorum of voters): `leader` is then
   * null rather than the last one seen, and routing prefers this node's own workers.
   */
  view_stale: boolean;
  nodes: { name: string; address: string; state: string; last_seen_ms: number; meta: NodeMeta }[];
}

export class ClusterService {
  readonly auth: PeerAuth;
  private readonly token: string;
  private _backend: DiscoveryBackend | null = null;
  private started = false;

  constructor(private readonly o: ClusterServiceOptions) {
    this.token = loadToken(o.config.cluster);
    this.auth = new PeerAuth(this.token, o.clock, o.log.child("peer-auth"));
  }

  /** The shared cluster token ("" = none): what this node sends on its own peer calls. */
  get peerToken(): string {
    return this.token;
  }

  get backend(): DiscoveryBackend | null {
    return this._backend;
  }

  /** Refuse a cluster reachable from other hosts without a token (issue 12). */
  private checkExposure(): void {
    if (this.token !== "") return;
    const c = this.o.config.cluster;
    // The default (file records under this node's own data dir) is a one-host cluster: no peer can
    // join it, so a node advertised on a LAN address without a token is not exposed by it.
    if (c.discovery === "file" && c.file.dir === "") return;
    const remote = [this.o.address, ...(c.discovery === "peers" ? c.peers.seeds : [])].filter((a) => !isLoopbackAddress(a));
    if (remote.length > 0)
      throw new HerdError(500, "server_error", `cluster: refusing to start on non-loopback address ${remote[0]} without cluster.token or cluster.token_file`, "cluster_token_required");
  }

  async start(): Promise<void> {
    if (this.started) return;
    this.checkExposure();
    const { node, cluster } = this.o.config;
    const store = new StateStore(node.data_dir);
    this._backend = createBackend(cluster.discovery, {
      cluster,
      store,
      fileDir: cluster.file.dir !== "" ? cluster.file.dir : join(node.data_dir, "cluster", "dir"),
      token: this.token,
      clock: this.o.clock,
      rng: this.o.rng,
      log: this.o.log.child(`cluster.${cluster.discovery}`),
      dial: this.o.dial,
      timing: this.o.timing,
      election: this.o.election,
      fetch: this.o.fetch,
      transport: this.o.transport,
    });
    await this._backend.start({ name: node.name, address: this.o.address, meta: this.o.meta ?? {} });
    if (this.o.campaign !== false) this._backend.campaign();
    this.started = true;
  }

  async stop(): Promise<void> {
    const b = this._backend;
    this.started = false;
    if (b) await b.close();
  }

  /** Replace this node's published metadata (e.g. encodeAdvert() of its workers). */
  setMeta(meta: NodeMeta): void {
    this._backend?.setMeta(meta);
  }

  members(): Member[] {
    return this._backend?.members() ?? [];
  }

  leader(): LeaderView {
    return this._backend?.leader() ?? { leader: null, term: 0, self: false };
  }

  watch(fn: (e: ClusterEvent) => void): () => void {
    if (!this._backend) throw new HerdError(500, "server_error", "cluster service not started", "cluster_not_started");
    return this._backend.watch(fn);
  }

  /**
   * See ClusterView.view_stale. A backend that knows (etcd: its lease and calls) says so; otherwise
   * a node that knows no leader is cut off from a quorum (peers: an isolated follower finds no
   * leader and wins no PreVote; an isolated leader steps down by CheckQuorum).
   */
  stale(): boolean {
    const b = this._backend;
    if (!b) return false;
    if (b.stale) return b.stale();
    const l = b.leader();
    return !l.self && l.leader === null;
  }

  view(): ClusterView {
    const l = this.leader();
    const stale = this.stale();
    return {
      node: this.o.config.node.name,
      discovery: this.o.config.cluster.discovery,
      leader: stale && !l.self ? null : l.leader,
      term: l.term,
      is_leader: l.self,
      view_stale: stale,
      nodes: this.members().map((m) => ({ name: m.name, address: m.address, state: m.state, last_seen_ms: m.lastSeenMs, meta: m.meta })),
    };
  }
}
