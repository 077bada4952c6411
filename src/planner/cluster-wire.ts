// The cluster planner on a live node (the daemon builds one per node): this node's
// AssignmentApplier (its own LocalActuator behind the lease and a TermFence), its ClusterPlanning
// (used while it leads), the summary rounds the leader runs every tick (POST
// /cluster/v1/planner/summary to every live peer, this node's own in-process), the peer API
// handlers (summary, assign, push of a follower's summary when it holds requests, status) and the
// cluster-wide GET /admin/planner view: on the leader its own decision and every node's engines; on
// a follower the leader's answer (asked over the peer API), or this node's own view when the
// leader cannot be reached.
import { TermFence } from "../cluster/fence.ts";
import { httpPeerClient } from "../cluster/client.ts";
import type { Clock, TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Actuator } from "./actuator.ts";
import { AssignmentApplier, type Assignment, type AssignmentReply } from "./assign.ts";
import { ClusterPlanning, nodeSummary, type NodeSummary } from "./cluster-plan.ts";
import type { PlannerMetrics } from "./metrics.ts";
import type { PlannerService } from "./service.ts";
import type { PlannerStatus } from "./status.ts";

/** What the node's cluster layer tells the planner (ClusterNode implements it). */
export interface ClusterMembership {
  self: string;
  /** The leader this node knows of and its term; `self` true only while this node holds a live grant. */
  leader(): { leader: string | null; term: number; self: boolean };
  /** Other live nodes and their peer API address. */
  peers(): { name: string; address: string }[];
  token(): string;
}

const PEER_TIMEOUT_MS = 2_000;

/** The cluster-wide planner view: who plans, in which term, per pool desired/actual and which host runs what. */
export interface ClusterPlannerStatus extends PlannerStatus {
  planner_node: string | null;
  term: number;
  /** Why the leader does not act yet (a new leader's window), null when it does. */
  waiting_for: string | null;
  /** Answered by this node itself because the leader could not be asked. */
  leader_unreachable?: boolean;
  cluster_pools: { pool: string; desired: number | null; actual: number; reason: string | null; explain?: string; hosts: Record<string, string[]> }[];
  assignments: { refused: Record<string, number>; duplicates: number };
}

export class ClusterPlannerWiring {
  readonly applier: AssignmentApplier;
  readonly planning: ClusterPlanning;
  private planner: PlannerService | null = null;
  private timer: TimerHandle | null = null;
  private readonly epoch: string;
  /** Peers with a summary pull in flight: one at a time each (a hung peer cannot pile them up). */
  private readonly pulling = new Set<string>();

  constructor(
    private readonly o: { membership: ClusterMembership; clock: Clock; log: Logger; local: Actuator; tickMs: number; pools: readonly string[]; gpusOf: (pool: string) => number; metrics?: PlannerMetrics | null; epoch: string },
  ) {
    this.epoch = o.epoch;
    const m = o.membership;
    const lease = () => {
      const l = m.leader();
      return l.leader === null ? null : { term: l.term, leader: l.leader };
    };
    this.applier = new AssignmentApplier({ fence: new TermFence(), lease, local: o.local, onRefused: (why) => o.metrics?.assignmentRefused(why) });
    this.planning = new ClusterPlanning({
      self: m.self, clock: o.clock, pools: o.pools, staleMs: 3 * o.tickMs, gpusOf: o.gpusOf, windowMs: o.tickMs,
      leading: () => {
        const l = m.leader();
        return l.self ? l.term : null;
      },
      leader: () => m.leader().leader,
      live: () => [m.self, ...m.peers().map((p) => p.name)],
      send: (node, a) => (node === m.self ? this.applier.apply(a) : this.post<AssignmentReply>(node, "planner/assign", a)),
      selfSummary: () => this.summary(),
    });
    this.planning.nudge = () => this.pushToLeader();
  }

  /** The service this wiring serves (built with `cluster: wiring.planning`). */
  attach(planner: PlannerService): void {
    this.planner = planner;
  }

  start(): void {
    this.round();
  }

  stop(): void {
    this.timer?.cancel();
    this.timer = null;
  }

  summary(): NodeSummary {
    if (!this.planner) throw new Error("cluster planner wiring: no planner attached");
    return nodeSummary(this.planner, this.o.membership.self, this.epoch);
  }

  /** The peer API's planner routes (src/cluster/routes.ts PeerPlannerRoutes). */
  routes() {
    return {
      summary: () => {
        this.planning.heardFromLeader();
        return this.summary();
      },
      assign: (body: unknown) => {
        this.planning.heardFromLeader();
        return this.applier.apply(body as Assignment);
      },
      push: (body: unknown) => {
        if (!isSummary(body)) return { ok: false };
        if (this.planning.leading() === null) return { ok: false };
        this.planning.ingest(body);
        this.planner?.poke();
        return { ok: true };
      },
      status: () => this.localStatus(),
    };
  }

  /** GET /admin/planner on any node: the leader's view (asked over the peer API when this node follows). */
  async status(): Promise<ClusterPlannerStatus> {
    const l = this.o.membership.leader();
    if (l.self || l.leader === null || l.leader === this.o.membership.self) return this.localStatus();
    try {
      return await this.post<ClusterPlannerStatus>(l.leader, "planner/status", {});
    } catch (e) {
      this.o.log.debug("planner status: leader unreachable", { leader: l.leader, err: errorMessage(e) });
      return { ...this.localStatus(), leader_unreachable: true };
    }
  }

  localStatus(): ClusterPlannerStatus {
    const planner = this.planner!;
    const base = planner.status();
    const l = this.o.membership.leader();
    const summaries = l.self ? this.planning.summaries() : [this.summary()];
    const last = planner.lastDecision;
    const cluster_pools = this.o.pools.map((pool) => {
      const hosts: Record<string, string[]> = {};
      let actual = 0;
      for (const s of summaries)
        for (const e of s.engines)
          if (e.pool === pool && e.state !== "stopped") {
            (hosts[s.node] ??= []).push(`${e.id}:${e.state}`);
            if (e.state === "ready" || e.state === "starting" || e.state === "waking") actual++;
          }
      const d = l.self ? last?.pools.find((p) => p.pool === pool) : undefined;
      return { pool, desired: d?.desired ?? null, actual, reason: d?.reason ?? (l.self ? null : "follower: the leader decides"), ...(d?.explain !== undefined ? { explain: d.explain } : {}), hosts };
    });
    return {
      ...base, planner_node: l.leader, term: l.term, waiting_for: l.self ? planner.waitingFor : null, cluster_pools,
      assignments: { refused: { ...this.applier.refused }, duplicates: this.applier.duplicates },
    };
  }

  /** One summary round (the leader's): every live peer's summary, and this node's own. */
  private round(): void {
    this.timer = this.o.clock.setTimer(this.o.tickMs, () => {
      if (this.planning.leading() !== null && this.planner) {
        this.planning.ingest(this.summary());
        for (const p of this.o.membership.peers()) {
          if (this.pulling.has(p.name)) continue;
          this.pulling.add(p.name);
          this.post<NodeSummary>(p.name, "planner/summary", {})
            .then((s) => {
              if (isSummary(s) && s.node === p.name) this.planning.ingest(s);
            })
            .catch((e) => this.o.log.debug("planner summary pull failed", { node: p.name, err: errorMessage(e) }))
            .finally(() => this.pulling.delete(p.name));
        }
      }
      this.round();
    });
  }

  /** A follower holds requests: its summary goes to the leader now, which runs a tick. */
  private pushToLeader(): void {
    const l = this.o.membership.leader();
    if (l.leader === null || l.self || !this.planner) return;
    this.post(l.leader, "planner/push", this.summary()).catch((e) => this.o.log.debug("planner summary push failed", { leader: l.leader, err: errorMessage(e) }));
  }

  private post<T>(node: string, path: string, body: unknown): Promise<T> {
    const peer = this.o.membership.peers().find((p) => p.name === node);
    if (!peer) return Promise.reject(new Error(`${node} is not a live peer`));
    return httpPeerClient({ token: this.o.membership.token() }).post<T>(peer.address, path, body, PEER_TIMEOUT_MS);
  }
}

function isSummary(x: unknown): x is NodeSummary {
  if (typeof x !== "object" || x === null) return false;
  const s = x as Record<string, unknown>;
  return typeof s.node === "string" && typeof s.epoch === "string" && typeof s.totals === "object" && s.totals !== null && Array.isArray(s.engines) && s.engines.length <= 4096 && typeof s.host === "object" && s.host !== null && Array.isArray(s.templates);
}
