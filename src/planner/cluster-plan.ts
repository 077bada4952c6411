// One planner for the cluster (issue 20): the leader's. Every node publishes a small summary (its
// pools' cumulative arrivals and tokens, held requests, its engines with in-flight, queue and KV
// usage, its host's GPUs and the pools it can start: its engines[] templates); the leader's
// PlannerService reads the sum of them (ClusterPlanning.observe), decides per pool for the cluster,
// and sends each action as an assignment to the node that carries it out (ClusterActuator). A node
// applies an assignment only when it is stamped with the current term of the leader whose lease it
// knows, and only once per assignment id (assign.ts AssignmentApplier: TermFence on the actuation
// path, refusals counted). A new leader acts only after it has received two summaries from every live
// node since it took over (one full window of their counts): until then nodes keep what they run.
import type { Clock } from "../core/clock.ts";
import type { ActuationResult, Actuator } from "./actuator.ts";
import type { Assignment, AssignmentReply } from "./assign.ts";
import type { ClusterScope, PoolTotals } from "./service.ts";
import { latencyMean } from "./signals.ts";
import type { Action, Fleet, FleetEngine, FleetHost, PoolSignals } from "./types.ts";

/** What one node tells the leader each tick (GET /cluster/v1/planner/summary). */
export interface NodeSummary {
  node: string;
  /** The node's planner instance: a restart starts its totals again. */
  epoch: string;
  /** Per pool, cumulative since `epoch` began (the leader takes differences between summaries). */
  totals: Record<string, PoolTotals>;
  held: Record<string, { requests: number; promptTokens: number }>;
  /** Its engines of planner pools (host = node). */
  engines: FleetEngine[];
  /** Per engine: requests waiting inside it and KV usage (0..1), as scraped; null when unknown. */
  load: Record<string, { waiting: number | null; kvUsage: number | null }>;
  host: { gpusTotal: number; gpusFree: number; backoffUntilMs: number };
  /** Pools this node can start: the planner pools among its engines[] entries (its templates). */
  templates: string[];
  /** Latency this node's requests saw (ms), for status and the SLA mode; null when none yet. */
  latency: { ttftMsP50: number; ttftMsP99: number; itlMsP50: number; itlMsP99: number } | null;
}

interface Received {
  s: NodeSummary;
  atMs: number;
}

export interface ClusterPlanningOptions {
  self: string;
  clock: Clock;
  pools: readonly string[];
  /** This node's leadership: the term it leads in with a fresh lease, or null. */
  leading: () => number | null;
  leader: () => string | null;
  /** The nodes the membership says are alive (this one included). */
  live: () => readonly string[];
  /** Send an assignment to a node (this node's own applier for itself). */
  send: (node: string, a: Assignment) => Promise<AssignmentReply>;
  /** A summary older than this is stale: its node is left out of the plan (e.g. 3 × tick). */
  staleMs: number;
  /** GPUs one engine of a pool takes (a start counts them until a summary shows the engine). */
  gpusOf: (pool: string) => number;
  /** More per-pool figures for the decision, cluster-wide (the simulator's emulated anchors). */
  extraSignals?: (pool: string) => object;
  /** A full window lasts at least this long (one planner tick): two quick pushes are not a window. */
  windowMs?: number;
  /** This node's own summary, taken fresh at every decision (its held requests, its engines now). */
  selfSummary?: () => NodeSummary;
}

/** The leader's side: summaries in, cluster signals and fleet out, actions out as assignments. */
export class ClusterPlanning implements ClusterScope {
  private readonly nodes = new Map<string, { prev: Received | null; last: Received; leaderCount: number; history: Received[] }>();
  private leaderSinceMs: number | null = null;
  private leaderTerm: number | null = null;
  private actuators = new Map<number, ClusterActuator>();
  /** Assignment ids never repeat within this planner's life, even across its leaderships of one term. */
  private readonly ids = { next: 0 };
  /** A follower with held requests pushed its summary (wake on request across nodes); set by the wiring. */
  nudge: (() => void) | null = null;
  /** The fleet of the last decision (the simulator checks it against the truth: a blind start is a double start). */
  observed: Fleet | null = null;
  /** When a leader last reached this node (pulled its summary, sent an assignment); null = never. */
  private leaderContactMs: number | null = null;

  /** A leader reached this node (its summary pulled, an assignment received). */
  heardFromLeader(): void {
    this.leaderContactMs = this.o.clock.now();
  }

  /** No leader known, or none reached this node within staleMs: its holds may wake its own sleepers. */
  cutOff(): boolean {
    if (this.o.leader() === null) return true;
    return this.leaderContactMs === null ? false : this.o.clock.now() - this.leaderContactMs > this.o.staleMs;
  }

  constructor(private readonly o: ClusterPlanningOptions) {}

  /** A node's summary arrived (the leader pulled it, or a follower pushed it). */
  ingest(s: NodeSummary): void {
    const atMs = this.o.clock.now();
    const had = this.nodes.get(s.node);
    const sameEpoch = had !== undefined && had.last.s.epoch === s.epoch;
    const counts = this.leaderSinceMs !== null && atMs >= this.leaderSinceMs ? 1 : 0;
    // Rates need a window of at least windowMs: the window starts at the newest earlier summary
    // that old (a push on a held request, or a fresh own summary at every decision, does not
    // shorten it); bounded history.
    const minMs = this.o.windowMs ?? this.o.staleMs / 3;
    const history = sameEpoch ? [...had.history, had.last].filter((x) => atMs - x.atMs <= 4 * minMs + this.o.staleMs).slice(-16) : [];
    let prev: Received | null = null;
    for (const x of history) if (atMs - x.atMs >= minMs) prev = x;
    this.nodes.set(s.node, { prev, last: { s, atMs }, leaderCount: (sameEpoch ? had.leaderCount : 0) + counts, history });
  }

  leading(): number | null {
    const term = this.o.leading();
    if (term !== null && term !== this.leaderTerm) {
      this.leaderTerm = term;
      this.leaderSinceMs = this.o.clock.now();
      for (const n of this.nodes.values()) n.leaderCount = 0;
      this.actuators.clear();
    }
    if (term === null) this.leaderTerm = this.leaderSinceMs = null;
    return term;
  }

  leader(): string | null {
    return this.o.leader();
  }

  /** The nodes whose summaries are fresh. */
  private fresh(nowMs: number): Received[] {
    const live = new Set(this.o.live());
    return [...this.nodes.entries()].filter(([name, n]) => live.has(name) && nowMs - n.last.atMs <= this.o.staleMs).map(([, n]) => n.last);
  }

  observe(nowMs: number, _term: number): { signals: Map<string, PoolSignals>; fleet: Fleet } | string {
    if (this.o.selfSummary) this.ingest(this.o.selfSummary());
    // Nodes that left long ago are forgotten (the map stays bounded by the membership).
    const alive = new Set(this.o.live());
    for (const [name, n] of this.nodes) if (!alive.has(name) && nowMs - n.last.atMs > 10 * this.o.staleMs) this.nodes.delete(name);
    const since = this.leaderSinceMs ?? nowMs;
    const windowMs = this.o.windowMs ?? 0;
    // A full window: two summaries since this leadership began from every live node (a node
    // that stays silent for staleMs after it is left out: it is gone or cut off).
    const missing = this.o.live().filter((name) => {
      const n = this.nodes.get(name);
      if (n && n.leaderCount >= 2 && n.prev !== null && n.last.atMs - since >= windowMs) return false;
      return nowMs - since < this.o.staleMs || (n !== undefined && nowMs - n.last.atMs <= this.o.staleMs);
    });
    if (missing.length > 0) return `new_leader_window: waiting for ${missing.join(",")}`;
    const signals = new Map<string, PoolSignals>();
    for (const pool of this.o.pools) signals.set(pool, { arrivalsPerS: 0, uncachedPrefillTokensPerS: 0, decodeTokensPerS: 0, heldRequests: 0, heldTokens: 0, ...this.o.extraSignals?.(pool) });
    const engines: FleetEngine[] = [];
    const hosts: FleetHost[] = [];
    // Finished requests' latency in the window, summed over the nodes (SLA mode's measured TTFT/ITL).
    const lat = new Map(this.o.pools.map((p) => [p, { tc: 0, ts: 0, ic: 0, is: 0 }]));
    for (const r of this.fresh(nowMs)) {
      const n = this.nodes.get(r.s.node)!;
      const dtS = n.prev ? Math.max(1, r.atMs - n.prev.atMs) / 1000 : 0;
      for (const pool of this.o.pools) {
        const x = signals.get(pool)!;
        const a = r.s.totals[pool];
        const b = n.prev?.s.totals[pool];
        if (a && dtS > 0) {
          x.arrivalsPerS += Math.max(0, a.arrivals - (b?.arrivals ?? 0)) / dtS;
          x.uncachedPrefillTokensPerS += Math.max(0, a.promptTokens - (b?.promptTokens ?? 0)) / dtS;
          x.decodeTokensPerS += Math.max(0, a.decodeTokens - (b?.decodeTokens ?? 0)) / dtS;
          const l = lat.get(pool)!;
          const diff = (k: "ttftCount" | "ttftMsSum" | "itlCount" | "itlMsSum") => Math.max(0, (a[k] ?? 0) - (b?.[k] ?? 0));
          l.tc += diff("ttftCount");
          l.ts += diff("ttftMsSum");
          l.ic += diff("itlCount");
          l.is += diff("itlMsSum");
        }
        x.heldRequests += r.s.held[pool]?.requests ?? 0;
        x.heldTokens += r.s.held[pool]?.promptTokens ?? 0;
      }
      engines.push(...r.s.engines.map((e) => ({ ...e, host: r.s.node })));
      hosts.push({ name: r.s.node, ...r.s.host, pools: r.s.templates });
    }
    for (const [pool, l] of lat) Object.assign(signals.get(pool)!, { ttftMsMean: latencyMean(l.ts, l.tc), itlMsMean: latencyMean(l.is, l.ic), latencySamples: Math.max(l.tc, l.ic) });
    const fleet = this.actuator(this.leaderTerm ?? 0).withLaunched({ engines, hosts }, nowMs);
    this.observed = fleet;
    return { signals, fleet };
  }

  actuator(term: number): ClusterActuator {
    let a = this.actuators.get(term);
    if (!a) {
      a = new ClusterActuator({ self: this.o.self, term, ids: this.ids, send: this.o.send, clock: this.o.clock, fleet: () => this.lastFleet(), forgetMs: this.o.staleMs * 2, gpusOf: this.o.gpusOf });
      this.actuators.set(term, a);
    }
    return a;
  }

  /** The fleet as the summaries last showed it (no fresh ingest: an action's lookup must not move the window). */
  private lastFleet(): Fleet {
    const engines: FleetEngine[] = [];
    const hosts: FleetHost[] = [];
    for (const r of this.fresh(this.o.clock.now())) {
      engines.push(...r.s.engines.map((e) => ({ ...e, host: r.s.node })));
      hosts.push({ name: r.s.node, ...r.s.host, pools: r.s.templates });
    }
    return { engines, hosts };
  }

  /** Every node's last summary (for GET /admin/planner: hosts and what they run). */
  summaries(): NodeSummary[] {
    return [...this.nodes.values()].map((n) => n.last.s);
  }

  /** A node left the membership. */
  forget(node: string): void {
    this.nodes.delete(node);
  }
}

/** The leader's actions as assignments stamped with its term; starts count as starting until a summary shows them. */
export class ClusterActuator implements Actuator {
  private readonly launched = new Map<string, { engine: FleetEngine; atMs: number }>();
  refused = 0;

  constructor(private readonly o: { self: string; term: number; ids: { next: number }; send: (node: string, a: Assignment) => Promise<AssignmentReply>; clock: Clock; fleet: () => Fleet; forgetMs: number; gpusOf: (pool: string) => number }) {}

  fleet(): Fleet {
    return this.o.fleet();
  }

  /** The summaries' fleet plus engines this leader started that no summary shows yet. */
  withLaunched(f: Fleet, nowMs: number): Fleet {
    // Seen means seen serving or coming: a supervisor may hand a new engine the id of one it is
    // still removing (ids are stable per slot), and that one's draining entry is not the start.
    const seen = new Set(f.engines.filter((e) => e.state === "starting" || e.state === "ready" || e.state === "waking").map((e) => e.id));
    const shown = new Set(f.engines.map((e) => e.id));
    const extra: FleetEngine[] = [];
    for (const [id, l] of this.launched) {
      if (seen.has(id) || nowMs - l.atMs > this.o.forgetMs) this.launched.delete(id);
      else if (!shown.has(id)) extra.push(l.engine);
      else extra.push({ ...l.engine, id: `${id}#launched` });
    }
    if (extra.length === 0) return f;
    const hosts = f.hosts.map((h) => {
      const used = extra.filter((e) => e.host === h.name).reduce((n, e) => n + e.gpus, 0);
      return used > 0 ? { ...h, gpusFree: Math.max(0, h.gpusFree - used) } : h;
    });
    return { engines: [...f.engines, ...extra], hosts };
  }

  async act(action: Action): Promise<ActuationResult> {
    const node = action.kind === "start" ? action.host : this.o.fleet().engines.find((e) => e.id === action.engine)?.host;
    const engine = action.kind === "start" ? null : action.engine;
    if (!node) return { ok: true, engine, skipped: "unknown engine" };
    const a: Assignment = { id: `${this.o.self}/${this.o.term}/${this.o.ids.next++}`, term: this.o.term, leader: this.o.self, action };
    // A start counts as starting from the moment it is sent: a tick (or a poke) before the node's
    // answer must not start another (the double start this guards against).
    const placeholder = `pending:${a.id}`;
    const now = this.o.clock.now();
    if (action.kind === "start")
      this.launched.set(placeholder, { engine: { id: placeholder, pool: action.pool, host: node, state: "starting", inFlight: 0, pendingTransfers: 0, gpus: this.o.gpusOf(action.pool), sinceMs: now }, atMs: now });
    let reply: AssignmentReply;
    try {
      reply = await this.o.send(node, a);
    } catch (e) {
      this.launched.delete(placeholder);
      return { ok: false, engine, error: `assignment to ${node}: ${e instanceof Error ? e.message : String(e)}` };
    }
    this.launched.delete(placeholder);
    if (!reply.ok) {
      this.refused++;
      return { ok: false, engine, error: `refused by ${node}: ${reply.refused} (its term ${reply.term})` };
    }
    const r = reply.result;
    if (action.kind === "start" && r.ok && r.engine) {
      const gpus = this.o.gpusOf(action.pool);
      this.launched.set(r.engine, { engine: { id: r.engine, pool: action.pool, host: node, state: "starting", inFlight: 0, pendingTransfers: 0, gpus, sinceMs: this.o.clock.now() }, atMs: this.o.clock.now() });
    }
    return r;
  }

  watch(): () => void {
    return () => {};
  }

  predictReadyMs(): number | null {
    return null;
  }
}

/** What a node's planner tells the leader (the summary's figures from its own service and actuator). */
export function nodeSummary(
  planner: { poolTotals(): Record<string, PoolTotals>; hold: { summary(pool: string): { requests: number; promptTokens: number } }; plannerConfig: { pools: readonly { id: string }[] }; localFleet(): Fleet },
  node: string,
  epoch: string,
  extra: { load?: NodeSummary["load"]; latency?: NodeSummary["latency"] } = {},
): NodeSummary {
  const fleet = planner.localFleet();
  const pools = planner.plannerConfig.pools.map((p) => p.id);
  const held: NodeSummary["held"] = {};
  for (const p of pools) {
    const h = planner.hold.summary(p);
    if (h.requests > 0) held[p] = { requests: h.requests, promptTokens: h.promptTokens };
  }
  const h = fleet.hosts.find((x) => x.name === node) ?? fleet.hosts[0];
  return {
    node, epoch, totals: planner.poolTotals(), held, engines: fleet.engines.map((e) => ({ ...e })), load: extra.load ?? {},
    host: { gpusTotal: h?.gpusTotal ?? 0, gpusFree: h?.gpusFree ?? 0, backoffUntilMs: h?.backoffUntilMs ?? 0 }, templates: pools, latency: extra.latency ?? null,
  };
}
