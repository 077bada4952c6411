// ClusterNode: the cluster as one daemon service. It runs a ClusterService and keeps two things in
// step with the node's WorkerRegistry:
//   - out: this node's own workers, published as an advert in its member metadata (publish.ts),
//     on every registry change (coalesced into one setMeta per PUBLISH_COALESCE_MS) and every
//     LOAD_REFRESH_MS (load figures change without a registry event);
//   - in: every other member's pooled workers (poolWorkers: model cards must agree) upserted into
//     the registry with node = their node, url = their node's peer API base; removed when their
//     node leaves the view (backend.ts DEFAULT_TIMING: within 5 s) or stops publishing them.
// Requests to those workers go through the owner's peer API (remote-upstream.ts, forward.ts).
import { createHash } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { Clock, TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Rng } from "../core/rng.ts";
import type { Tracer } from "../core/trace.ts";
import type { Config } from "../config/types.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { Worker } from "../workers/worker.ts";
import type { ClusterEvent, HeartbeatTiming } from "./backend.ts";
import type { ElectionTiming } from "./election.ts";
import { ADVERT_META_KEY, advertise, decodeAdvert, encodeAdvert, poolWorkers, type ModelCard, type NodeAdvert } from "./publish.ts";
import { ClusterService, type ClusterView } from "./service.ts";
import { clusterRoutes, type PeerPlannerRoutes } from "./routes.ts";
import { forwardHandler } from "./forward.ts";
import type { Upstream } from "../request/upstream.ts";
import { httpPeerClient } from "./client.ts";
import type { PeerClient } from "./peers.ts";
import type { PeerRef, PeerTierSource } from "./peer-tier.ts";
import { startPeerListener, type PeerListener } from "./peer-listener.ts";
import { loadPeerTls, peerTransport, plainTransport, type PeerTransport } from "./tls.ts";
import { QuotaSync, QUOTA_ASK_MAX_BYTES } from "./quota-sync.ts";
import { certNotAfterS } from "../http/tls-files.ts";
import { KV_RELAY_POLL_MS, applyRelayReply, type RelayCursor, type RelayIndex, type RelayReply } from "./kv-relay.ts";

/** Registry changes within this window become one advert (a restart storm is one heartbeat payload). */
export const PUBLISH_COALESCE_MS = 50;
/** How often load figures are re-published and remote loads re-read (a heartbeat carries them anyway). */
export const LOAD_REFRESH_MS = 1000;

export interface ClusterNodeOptions {
  config: Pick<Config, "node" | "cluster" | "models" | "supervisor">;
  registry: WorkerRegistry;
  /** host:port of this node's peer API (node.advertise + the listener's port), known once it listens. */
  address: () => string;
  clock: Clock;
  rng: Rng;
  log: Logger;
  /** This node's own way to its engines, for legs other nodes forward here (never a RemoteUpstream). */
  localUpstream: Upstream<Uint8Array>;
  /** frontend.max_body_bytes as it runs now (a forwarded leg's body obeys the same bound). */
  maxBodyBytes: () => number;
  /** frontend.max_in_flight as it runs now: also the bound on legs other nodes forward here. */
  maxInFlight?: () => number;
  /** The node is draining: its workers are advertised as draining (no new remote legs) and forwards are refused. */
  draining?: () => boolean;
  /** The node is leaving (shutdown's first step): its workers are advertised as draining, forwards are still served. */
  leaving?: () => boolean;
  /** The node's block index when it relays KV residency (kv-relay.ts); absent: no relay. */
  kvIndex?: RelayIndex;
  /** This node's KV tier as peers see it (GET /cluster/v1/tier/<key>, peer-tier.ts); absent: 404 there. */
  tierSource?: PeerTierSource;
  /** The planner's peer routes (src/planner/cluster-wire.ts), when this node runs the planner. */
  planner?: () => PeerPlannerRoutes | null;
  /** Spans for legs other nodes forward here (continuing the origin's traceparent); absent: none. */
  tracer?: Tracer;
  /** Test seams. */
  timing?: HeartbeatTiming;
  election?: ElectionTiming;
}

/** The model cards of this node's config: what other nodes check before pooling its workers. */
export function modelCards(config: Pick<Config, "models" | "supervisor">): ModelCard[] {
  return config.models.map((m) => ({
    model: m.name,
    block_size: m.block_size,
    tokenizer_checksum: tokenizerChecksum(m.tokenizer),
    hash_seed: config.supervisor.python_hash_seed,
  }));
}

/** SHA-256 of tokenizer.json (+ tokenizer_config.json) in a tokenizer dir; "" for the built-in one. */
function tokenizerChecksum(dir: string): string {
  if (dir === "") return "";
  const h = createHash("sha256");
  for (const f of ["tokenizer.json", "tokenizer_config.json"]) {
    const p = join(dir, f);
    if (existsSync(p)) h.update(f).update(readFileSync(p));
  }
  return h.digest("hex");
}

export class ClusterNode {
  readonly name = "cluster";
  private svc: ClusterService | null = null;
  private cards: ModelCard[] = [];
  private readonly remote = new Map<string, string>(); // remote worker id → its node
  private refusals = new Set<string>();
  private published = "";
  private publishTimer: TimerHandle | null = null;
  private refreshTimer: TimerHandle | null = null;
  private unsubs: (() => void)[] = [];
  private stopped = false;
  private app: ReturnType<typeof clusterRoutes> | null = null;
  /** Per other node: the relay cursor, the remote workers its updates were applied to, a poll in flight. */
  private readonly relay = new Map<string, { cursor: RelayCursor; known: Set<string>; busy: boolean }>();
  private relayTimer: TimerHandle | null = null;
  /** One peer client for the relay polls, so its 401 warnings are rate-limited across rounds. */
  private relayClient: { token: string; client: PeerClient } | null = null;
  /** Legs other nodes forwarded here: open now, refused over the bound. */
  readonly forwards = { open: 0, rejected: 0 };
  private peerListener: PeerListener | null = null;
  /** notAfter (Unix seconds) of the certificate the peer API presents; null without cluster.tls. */
  private _peerCertNotAfterS: number | null = null;
  private _transport: PeerTransport = plainTransport();

  /** Cluster-wide tenant budgets (quota.ts): leases from the leader, spent by the frontend's admission. */
  readonly quota: QuotaSync;

  constructor(private readonly o: ClusterNodeOptions) {
    const boot = `${o.rng.int(2 ** 31).toString(36)}${o.rng.int(2 ** 31).toString(36)}`;
    this.quota = new QuotaSync({
      self: o.config.node.name, boot, clock: o.clock, log: o.log.child("quota"),
      leadership: () => this.leadership(),
      addressOf: (name) => this.svc?.members().find((m) => m.name === name && m.state !== "dead" && m.address !== "")?.address ?? null,
      // With peers discovery the seeds are the cluster's voters: never divide by fewer (a node that
      // starts or is cut off alone does not take the whole limit, docs/tenants.md).
      nodes: () => Math.max(o.config.cluster.discovery === "peers" ? o.config.cluster.peers.seeds.length : 1, new Set([this.self, ...(this.svc?.members() ?? []).filter((m) => m.state !== "dead").map((m) => m.name)]).size),
      client: () => this.peerClient(),
    });
  }

  get service(): ClusterService | null {
    return this.svc;
  }

  get self(): string {
    return this.o.config.node.name;
  }

  async start(): Promise<void> {
    const { config, registry, clock, rng, log } = this.o;
    this.stopped = false;
    this.cards = modelCards(config);
    const meta = encodeAdvert(this.localAdvert());
    this.published = String(meta[ADVERT_META_KEY]);
    const tls = loadPeerTls(config.cluster);
    this._peerCertNotAfterS = tls ? certNotAfterS(tls.cert, "cluster.tls.cert") : null;
    this._transport = peerTransport(tls);
    // With cluster.listen the peer API has its own port (mutual TLS needs it): that port is the address.
    if (config.cluster.listen !== "") this.peerListener = startPeerListener({ listen: config.cluster.listen, tls, handle: (req, env) => this.handle(req, env) });
    const address = this.address();
    this.svc = new ClusterService({ config, address, clock, rng, log: log.child("cluster"), meta, timing: this.o.timing, election: this.o.election, transport: this._transport });
    try {
      await this.svc.start();
    } catch (e) {
      await this.peerListener?.stop();
      this.peerListener = null;
      throw e;
    }
    this.app = clusterRoutes(this.svc, {
      forward: forwardHandler({ self: this.self, registry, upstream: this.o.localUpstream, maxBodyBytes: this.o.maxBodyBytes, draining: this.o.draining, maxInFlight: this.o.maxInFlight, clock, log: log.child("forward"), ...(this.o.tracer ? { tracer: this.o.tracer } : {}) }, this.forwards),
      ...(this.o.tierSource ? { tier: this.o.tierSource } : {}),
      ...(this.o.planner ? { planner: this.o.planner } : {}),
      ...(this.o.kvIndex ? { kv: (c: RelayCursor) => this.o.kvIndex!.since(c.epoch, c.seq) } : {}),
      quota: { maxBytes: QUOTA_ASK_MAX_BYTES, answer: (body) => this.quota.answer(body) },
    });
    this.unsubs.push(
      registry.onChange((c) => {
        if (c.worker.node === this.self) this.schedulePublish();
      }),
      this.svc.watch((e) => this.onEvent(e)),
    );
    this.sync();
    this.refresh();
    if (this.o.kvIndex) this.pollRelay();
    this.quota.start();
    const l = this.svc.leader();
    log.info("cluster joined", { discovery: config.cluster.discovery, address, tls: tls !== null, leader: l.leader, term: l.term });
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.quota.stop();
    for (const u of this.unsubs.splice(0)) u();
    this.publishTimer?.cancel();
    this.refreshTimer?.cancel();
    this.relayTimer?.cancel();
    this.publishTimer = this.refreshTimer = this.relayTimer = null;
    for (const id of this.remote.keys()) {
      this.o.registry.remove(id);
      this.o.kvIndex?.removeRemote(id);
    }
    this.relay.clear();
    this.remote.clear();
    await this.svc?.stop();
    await this.peerListener?.stop();
    this.peerListener = null;
    this.app = null;
  }

  /** This node's peer address: node.advertise + the peer listener's port when it has one, else the daemon's. */
  private address(): string {
    if (!this.peerListener) return this.o.address();
    const a = this.o.config.node.advertise;
    return a.includes(":") ? `[${a}]:${this.peerListener.port}` : `${a}:${this.peerListener.port}`;
  }

  /** notAfter (Unix seconds) of the peer API's certificate, for herd_tls_cert_expiry_timestamp_seconds; null without TLS. */
  get peerCertNotAfterS(): number | null {
    return this._peerCertNotAfterS;
  }

  /** How this node calls other nodes' peer APIs (https + its certificate under cluster.tls). */
  get transport(): PeerTransport {
    return this._transport;
  }

  /** The peer API (/cluster/v1/*) for the node's listener; 503 until the service has started. */
  handle(req: Request, env: { ip: string | null }): Response | Promise<Response> {
    if (!this.app || this.stopped) return Response.json({ error: { message: "cluster not started", type: "server_error", code: "cluster_not_started" } }, { status: 503 });
    return this.app.fetch(req, env);
  }

  /** The leader this node knows of and its term; `self` only while this node holds a live grant. */
  leadership(): { leader: string | null; term: number; self: boolean } {
    if (!this.svc || this.stopped) return { leader: null, term: 0, self: false };
    return this.svc.leader();
  }

  /** The cluster token for this node's own peer calls ("" before start or without one). */
  token(): string {
    return this.svc?.peerToken ?? "";
  }

  /** Leader, term and members for /admin/cluster. */
  view(): Pick<ClusterView, "leader" | "term" | "discovery" | "is_leader" | "view_stale"> & { nodes: { name: string; address: string; state: string; last_seen_ms: number }[]; forwarded: { open: number; rejected: number } } {
    const v = this.svc?.view();
    const forwarded = { ...this.forwards };
    if (!v) return { discovery: this.o.config.cluster.discovery, leader: null, term: 0, is_leader: false, view_stale: false, nodes: [], forwarded };
    return { discovery: v.discovery, leader: v.leader, term: v.term, is_leader: v.is_leader, view_stale: v.view_stale, nodes: v.nodes.map(({ name, address, state, last_seen_ms }) => ({ name, address, state, last_seen_ms })), forwarded };
  }

  /** This node cannot reach etcd / a quorum of voters (ClusterService.stale): routing prefers local workers. */
  viewStale(): boolean {
    return !this.stopped && (this.svc?.stale() ?? false);
  }

  /** The other nodes not known dead, with their peer API address (whom a KV tier miss asks, peer-tier.ts). */
  livePeers(): PeerRef[] {
    if (!this.svc || this.stopped) return [];
    return this.svc.members().filter((m) => m.name !== this.self && m.state !== "dead" && m.address !== "").map((m) => ({ name: m.name, address: m.address }));
  }

  /** The peer API base of a worker's node when the worker is remote; null for a local (or unknown) worker. */
  peerOf(workerId: string): string | null {
    if (!this.remote.has(workerId)) return null;
    return this.o.registry.get(workerId)?.url ?? null;
  }

  private localAdvert(): NodeAdvert {
    const a = advertise(this.self, this.o.registry.list(), this.cards);
    if (this.o.leaving?.() || this.o.draining?.()) for (const w of a.workers) if (w.state === "ready") w.state = "draining";
    return a;
  }

  /** Publish now (e.g. the node started draining: the others should stop sending legs at once). */
  publishNow(): void {
    if (!this.stopped) this.publish();
  }

  private schedulePublish(): void {
    if (this.publishTimer || this.stopped) return;
    this.publishTimer = this.o.clock.setTimer(PUBLISH_COALESCE_MS, () => {
      this.publishTimer = null;
      this.publish();
    });
  }

  private publish(): void {
    const meta = encodeAdvert(this.localAdvert());
    const text = String(meta[ADVERT_META_KEY]);
    if (text === this.published) return;
    this.published = text;
    this.svc?.setMeta(meta);
  }

  private refresh(): void {
    if (this.stopped) return;
    this.refreshTimer = this.o.clock.setTimer(LOAD_REFRESH_MS, () => {
      this.refreshTimer = null;
      this.publish();
      this.sync();
      this.refresh();
    });
  }

  private onEvent(e: ClusterEvent): void {
    if (e.kind === "members") this.sync();
    else this.o.log.info("cluster leader", { leader: e.view.leader, term: e.view.term, self: e.view.self });
  }

  /** Bring the registry's remote workers in line with the members' adverts. */
  private sync(): void {
    if (!this.svc || this.stopped) return;
    try {
      const members = this.svc.members().filter((m) => m.name !== this.self && m.state !== "dead");
      const address = new Map(members.map((m) => [m.name, m.address]));
      const adverts = members.map((m) => decodeAdvert(m)).filter((a): a is NodeAdvert => a !== null);
      const { workers, refused } = poolWorkers(this.localAdvert(), adverts);
      this.logRefusals(refused.map((r) => r.message), refused);
      const keep = new Set<string>();
      for (const w of workers) {
        const local = this.o.registry.get(w.id);
        if (local && !this.remote.has(w.id)) continue; // never let a peer shadow a worker of ours
        keep.add(w.id);
        this.upsertRemote({ ...w, url: `${this._transport.scheme}://${address.get(w.node)}` });
      }
      for (const [id, node] of [...this.remote]) {
        if (keep.has(id)) continue;
        this.remote.delete(id);
        this.o.registry.remove(id);
        this.o.kvIndex?.removeRemote(id);
        this.relay.get(node)?.known.delete(id);
        this.o.log.info("remote worker removed", { worker: id, node, reason: address.has(node) ? "no longer published" : "node left" });
      }
    } catch (e) {
      this.o.log.error("cluster sync failed", { err: errorMessage(e) });
    }
  }

  private upsertRemote(w: Worker): void {
    const { registry, log } = this.o;
    if (!this.remote.has(w.id)) {
      log.info("remote worker pooled", { worker: w.id, node: w.node, model: w.model, state: w.state });
      this.relay.delete(w.node); // its updates before now were not applied: start from a snapshot
    }
    this.remote.set(w.id, w.node);
    registry.upsert(w);
    // upsert keeps a known worker's load (registry.ts): the owner's figures come in as a scrape would.
    registry.updateLoad(w.id, { running: w.load.running, waiting: w.load.waiting, kv_usage: w.load.kv_usage });
  }

  /** One peer client for relay polls and quota asks, so its 401 warnings are rate-limited across rounds. */
  private peerClient(): PeerClient {
    const token = this.svc?.peerToken ?? "";
    if (this.relayClient?.token !== token) {
      this.relayClient = { token, client: httpPeerClient({ token, log: this.o.log, clock: this.o.clock, fetch: this._transport.fetch, scheme: this._transport.scheme }) };
    }
    return this.relayClient.client;
  }

  /** One relay round: ask every other node with pooled workers for its KV updates (one request per node in flight). */
  private pollRelay(): void {
    if (this.stopped || !this.svc) return;
    const index = this.o.kvIndex!;
    const client = this.peerClient();
    const nodes = new Set(this.remote.values());
    for (const name of [...this.relay.keys()]) if (!nodes.has(name)) this.relay.delete(name);
    for (const m of this.svc.members()) {
      if (m.name === this.self || m.state === "dead" || !nodes.has(m.name)) continue;
      let r = this.relay.get(m.name);
      if (!r) this.relay.set(m.name, (r = { cursor: { epoch: "", seq: 0 }, known: new Set(), busy: false }));
      if (r.busy) continue;
      r.busy = true;
      const st = r;
      client
        .post<RelayReply>(m.address, "kv", st.cursor, 2000)
        .then((reply) => {
          if (this.relay.get(m.name) !== st || this.stopped) return; // reset meanwhile (worker pooled, node left)
          const pooled = (w: string) => this.remote.get(w) === m.name;
          if (reply.truncated) this.o.log.warn("kv relay snapshot truncated", { node: m.name });
          st.cursor = applyRelayReply(index, st.cursor, reply, pooled, st.known);
        })
        .catch((e) => this.o.log.debug("kv relay poll failed", { node: m.name, err: errorMessage(e) }))
        .finally(() => (st.busy = false));
    }
    this.relayTimer = this.o.clock.setTimer(KV_RELAY_POLL_MS, () => this.pollRelay());
  }

  private logRefusals(messages: string[], refused: { node: string; model: string; field: string }[]): void {
    const now = new Set(messages);
    refused.forEach((r, i) => {
      if (!this.refusals.has(messages[i]!)) this.o.log.error(`cluster: ${messages[i]}`, { node: r.node, model: r.model, field: r.field });
    });
    this.refusals = now;
  }
}
