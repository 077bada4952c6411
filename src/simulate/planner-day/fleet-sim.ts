// A day of one pool on the virtual clock, on the real planner: every host is a node running herd's
// PlannerService (its HoldQueue behind the real plannerGate) over a LocalActuator on a
// VirtualSupervisor (virtual-supervisor.ts: each engine the sim engine's SimScheduler, fast-forwarded).
// The leader's service plans for the cluster (cluster-plan.ts): the nodes' summaries in, the
// decision, assignments out through each node's AssignmentApplier (TermFence on the actuation
// path). Offered load (src/workload/rate-shapes.ts) enters the nodes round-robin and goes through
// herd's real Router (least-loaded over every ready engine): fleet-traffic.ts. A planner law
// replaces only decide(): herd's, static peak provisioning, or an emulated anchor (laws.ts). Faults: a host that dies (its
// engines and their requests gone), and a leader failover (the leader stalls past the election
// timeout, the next node leads at term + 1, the old one resumes believing it still leads and keeps
// sending for `deposedS`: the nodes refuse it). Invariants (GPU budget and host GPUs never exceeded,
// no stop or sleep of an engine with requests in flight) throw with the time. One seed, one log.
import { TermFence } from "../../cluster/fence.ts";
import { VirtualClock } from "../../core/clock.ts";
import { createLogger } from "../../core/log.ts";
import { SeededRng } from "../../core/rng.ts";
import { defaultConfig } from "../../config/index.ts";
import { Router } from "../../router/index.ts";
import { WorkerRegistry } from "../../workers/registry.ts";
import { lognormal } from "../../workload/rate-shapes.ts";
import { LocalActuator } from "../../planner/actuator-local.ts";
import { AssignmentApplier, type Assignment, type AssignmentReply } from "../../planner/assign.ts";
import { ClusterPlanning, nodeSummary } from "../../planner/cluster-plan.ts";
import { plannerGate } from "../../planner/gate.ts";
import { PlannerService, type DecideFn } from "../../planner/service.ts";
import { FleetTraffic } from "./fleet-traffic.ts";
import { type FleetSimResult, type FleetSimSpec, type LawExtras, nodeConfig, type SimNode } from "./fleet-types.ts";
import { Scorecard } from "./score.ts";
import { VirtualSupervisor } from "./virtual-supervisor.ts";

export { DEFAULT_ENGINE, type FleetSimResult, type FleetSimSpec, type LawExtras, type PlannerLaw } from "./fleet-types.ts";

export function runFleetSim(spec: FleetSimSpec): Promise<FleetSimResult> {
  return new FleetSim(spec).run();
}

class FleetSim {
  private readonly clock = new VirtualClock(0);
  private readonly rng: SeededRng;
  private readonly startRng: SeededRng;
  private readonly pool;
  private readonly registry = new WorkerRegistry();
  private readonly router: Router;
  private readonly score: Scorecard;
  private readonly traffic: FleetTraffic;
  private readonly actionLog: string[] = [];
  private readonly leaders: string[] = [];
  private readonly nodes: SimNode[] = [];
  private readonly violations: string[] = [];
  private term = 1;
  private stallArmed = false;
  /** Counts of nodes replaced by their restarted selves. */
  private readonly retired = { refused: 0, duplicates: 0 };
  private doubleStarts = 0;
  private inFlightArea = 0;
  private lastAreaMs = 0;
  private totalArea = 0;
  private lastTickAreaMs = 0;
  private tickArea = 0;

  constructor(private readonly spec: FleetSimSpec) {
    this.rng = new SeededRng(spec.seed);
    this.startRng = this.rng.fork() as SeededRng;
    this.pool = spec.planner.pools[0]!;
    this.router = new Router({ config: { ...defaultConfig().router, policy: "least-loaded" }, registry: this.registry, clock: this.clock, rng: this.rng.fork() });
    this.score = new Scorecard(spec.slo, this.pool.gpusPerEngine);
    this.traffic = new FleetTraffic({ clock: this.clock, router: this.router, score: this.score, model: this.pool.model, nodes: () => this.nodes, accrue: () => this.accrue() });
  }

  async run(): Promise<FleetSimResult> {
    const { spec, clock } = this;
    for (const h of spec.hosts) this.nodes.push(this.newNode(h.name, h.gpus));
    this.elect(this.nodes[0]!);
    for (let i = 0; i < spec.initialEngines; i++) {
      const n = this.nodes[i % this.nodes.length]!;
      n.sup.currentTerm = this.term;
      n.sup.addReady(0);
    }
    for (const n of this.nodes) n.planner.start();
    this.traffic.schedule(spec.shape, spec.durationS, this.rng.fork());
    this.scheduleSummaries();
    this.scheduleFaults();
    const endMs = spec.durationS * 1000;
    // Every event runs inside step(); the microtasks it queued (actuations, hold releases) run
    // before the next event, so a virtual day sees what a live node would, in order.
    while (clock.peek() !== undefined && (clock.now() < endMs || this.totalInFlight() > 0 || this.heldTotal() > 0)) {
      if (clock.peek()! > endMs + 3_600_000) break;
      clock.step();
      for (let i = 0; i < 4; i++) await null;
      if (this.violations.length > 0) throw new Error(`invariant: ${this.violations[0]}`);
    }
    this.accrue();
    for (const n of this.nodes) if (n.up) await n.planner.stop();
    for (let i = 0; i < 8; i++) await null;
    return {
      ...this.score.result(clock.now()), mean_in_flight: clock.now() > 0 ? this.totalArea / clock.now() : 0, actions: this.actionLog,
      refused: this.retired.refused + this.nodes.reduce((n, x) => n + x.applier.refusedTotal, 0), double_starts: this.doubleStarts,
      duplicates: this.retired.duplicates + this.nodes.reduce((n, x) => n + x.applier.duplicates, 0), leaders: this.leaders,
    };
  }

  private newNode(name: string, gpus: number): SimNode {
    const { spec, clock } = this;
    const config = nodeConfig(spec, name);
    const log = createLogger("sim", { level: "error", sink: { write() {} } });
    const sup = new VirtualSupervisor({
      node: name, config, clock, gpusPerEngine: this.pool.gpusPerEngine, engine: spec.engine, wakeMs: spec.wakeS * 1000, onViolation: (m) => this.violations.push(m),
      startDelayMs: () => spec.startMedianS * 1000 * lognormal(this.startRng, spec.startSigma) * Math.exp((spec.startSigma * spec.startSigma) / 2),
    });
    const actuator = new LocalActuator({ config, supervisor: sup, clock, log, inFlight: (id) => sup.engines.get(id)?.inFlight ?? 0, hostGpus: gpus });
    const node = { name, gpus, sup, lease: null, up: true, stalled: false, epoch: `${name}@${clock.now()}`, leaseFresh: true } as unknown as SimNode;
    const fence = new TermFence();
    node.applier = new AssignmentApplier({
      // A lease not renewed since a stall is not fresh: the node's own applier refuses (no_lease).
      fence, lease: () => (node.leaseFresh ? node.lease : null), local: actuator,
      onApplied: (a, r) => {
        if (!r.ok || r.skipped) return;
        this.actionLog.push(`${(clock.now() / 1000).toFixed(1)} ${a.action.kind} ${a.action.kind === "start" ? a.action.host : a.action.engine}`);
        this.score.action(a.action.kind, clock.now());
      },
    });
    node.cluster = new ClusterPlanning({
      self: name, clock, pools: [this.pool.id], staleMs: spec.tickS * 3000, gpusOf: () => this.pool.gpusPerEngine,
      // A stalled process does not know it stalled: it still believes it leads (its sends do not go out).
      leading: () => (node.up && node.lease?.leader === name ? node.lease.term : null),
      leader: () => node.lease?.leader ?? null,
      live: () => this.nodes.filter((n) => n.up).map((n) => n.name),
      send: (to, a) => this.deliver(node, to, a),
      extraSignals: () => this.extras(),
      windowMs: spec.tickS * 1000,
      selfSummary: () => this.summaryOf(node),
    });
    node.planner = new PlannerService({
      config, clock, log, actuator, plannerConfig: { ...spec.planner, gpuBudget: spec.planner.gpuBudget }, decide: spec.law.decide as DecideFn, timeOfDayS: () => (clock.now() / 1000) % 86_400,
      cluster: node.cluster, hasReady: () => this.registry.eligible(this.pool.model).length > 0,
    });
    node.cluster.nudge = () => this.nudge(node);
    node.gate = plannerGate(node.planner, this.registry, false);
    sup.onChange((w) => {
      this.accrue();
      if (w.state === "stopped") this.registry.remove(w.id);
      else this.registry.upsert(w);
      this.checkGpus();
      if (w.state === "ready") for (const n of this.nodes) if (n.up) n.planner.releaseReady();
    });
    return node;
  }

  /** One assignment over the "network": a down or stalled node does not answer. */
  private async deliver(from: SimNode, to: string, a: Assignment): Promise<AssignmentReply> {
    if (from.stalled || !from.up) throw new Error(`${from.name} is stalled`);
    // Mid-scale-up: the leader stalls with this start on the wire; it goes out when the process resumes.
    if (this.stallArmed && a.action.kind === "start" && from.lease?.leader === from.name) await this.stall(from);
    const n = this.nodes.find((x) => x.name === to && x.up);
    if (!n || n.stalled) throw new Error(`${to} unreachable`);
    // The double-start check: a start decided without seeing an engine another term started that is
    // still coming (the leader would have counted it, and not started this one).
    if (a.action.kind === "start" && n.lease?.term === a.term && this.blindTo(from, a.term)) this.doubleStarts++;
    n.sup.currentTerm = a.term;
    return n.applier.apply(a);
  }

  private blindTo(leader: SimNode, term: number): boolean {
    const seen = new Set((leader.cluster.observed?.engines ?? []).map((e) => e.id));
    for (const n of this.nodes)
      if (n.up) for (const e of n.sup.engines.values()) if (e.term !== term && e.phase === "starting" && !seen.has(e.id)) return true;
    return false;
  }

  /** Every tick, between the planners' ticks, each node that believes it leads pulls every reachable node's summary. */
  private scheduleSummaries(): void {
    const every = this.spec.tickS * 1000;
    const round = () => {
      for (const l of this.nodes) {
        if (!l.up || l.stalled || l.lease?.leader !== l.name) continue;
        for (const n of this.nodes)
          if (n.up && !n.stalled) {
            l.cluster.ingest(this.summaryOf(n));
            n.cluster.heardFromLeader();
          }
      }
      this.clock.setTimer(every, round);
    };
    this.clock.setTimer(every / 2, round);
  }

  private summaryOf(n: SimNode): ReturnType<typeof nodeSummary> {
    return nodeSummary(n.planner, n.name, n.epoch);
  }

  /** A follower with a held request pushes its summary to the leader and pokes it (wake on request across nodes). */
  private nudge(from: SimNode): void {
    const l = this.nodes.find((n) => n.up && !n.stalled && n.lease?.leader === n.name && n.lease.term === from.lease?.term);
    if (!l || l === from) return;
    l.cluster.ingest(this.summaryOf(from));
    l.planner.poke();
  }

  private elect(leader: SimNode): void {
    for (const n of this.nodes) if (n.up && !n.stalled) n.lease = { term: this.term, leader: leader.name };
    this.leaders.push(`${(this.clock.now() / 1000).toFixed(1)} ${leader.name} ${this.term}`);
  }

  private scheduleFaults(): void {
    const f = this.spec.faults;
    if (f?.hostDown) {
      const { host, atS, backAtS } = f.hostDown;
      this.clock.setTimer(atS * 1000, () => {
        const n = this.nodes.find((x) => x.name === host);
        if (!n || !n.up) return;
        n.up = false;
        for (let i = n.sup.fail(); i > 0; i--) this.score.drop();
        void n.planner.stop();
        // The leader died: the next live node leads at a higher term.
        if (n.lease?.leader === n.name) {
          this.term++;
          this.elect(this.nodes.find((x) => x.up && !x.stalled)!);
        }
      });
      if (backAtS !== null)
        this.clock.setTimer(backAtS * 1000, () => {
          const i = this.nodes.findIndex((x) => x.name === host);
          const fresh = this.newNode(host, this.nodes[i]!.gpus);
          const leaderNode = this.nodes.find((x) => x.up && x.lease?.leader === x.name && !x.stalled);
          fresh.lease = leaderNode?.lease ? { ...leaderNode.lease } : null;
          this.retired.refused += this.nodes[i]!.applier.refusedTotal;
          this.retired.duplicates += this.nodes[i]!.applier.duplicates;
          this.nodes[i] = fresh;
          fresh.planner.start();
        });
    }
    if (f?.failover) {
      const { atS } = f.failover;
      // Armed at atS: the leader stalls with its next start assignment on the wire (mid-scale-up),
      // or an hour later whatever it is doing.
      this.clock.setTimer(atS * 1000, () => (this.stallArmed = true));
      this.clock.setTimer((atS + 3600) * 1000, () => {
        const old = this.nodes.find((n) => n.up && !n.stalled && n.lease?.leader === n.name);
        if (this.stallArmed && old) void this.stall(old);
      });
    }
  }

  /** The leader stalls past the election timeout; the others elect the next node; it resumes believing it leads. */
  private stall(old: SimNode): Promise<void> {
    const { stallS, deposedS } = this.spec.faults!.failover!;
    this.stallArmed = false;
    old.stalled = true;
    return this.clock.sleep(stallS * 1000).then(() => {
      this.term++;
      this.elect(this.nodes.find((n) => n.up && !n.stalled)!);
      old.stalled = false; // resumed, still believing it leads at the old term
      old.leaseFresh = false;
      this.clock.setTimer(deposedS * 1000, () => {
        const cur = this.nodes.find((n) => n.up && !n.stalled && n.lease?.term === this.term);
        if (old.up && cur?.lease) old.lease = { ...cur.lease };
        old.leaseFresh = true;
      });
    });
  }

  private totalInFlight(): number {
    let n = 0;
    for (const x of this.nodes) for (const e of x.sup.engines.values()) n += e.inFlight;
    return n;
  }

  private heldTotal(): number {
    return this.nodes.reduce((n, x) => n + (x.up ? x.planner.hold.size.count : 0), 0);
  }

  private engineCount(): number {
    return this.nodes.reduce((n, x) => n + (x.up ? x.sup.engines.size : 0), 0);
  }

  private accrue(): void {
    const now = this.clock.now();
    const area = this.totalInFlight() * (now - this.lastAreaMs);
    this.tickArea += area;
    this.totalArea += area;
    this.lastAreaMs = now;
    this.score.gpuTick(now, this.engineCount());
  }

  /** The anchors' extra signals, cluster-wide: mean concurrency per ready engine since the last tick, held requests. */
  private extras(): LawExtras {
    this.accrue();
    const now = this.clock.now();
    const dtMs = Math.max(1, now - this.lastTickAreaMs);
    const ready = this.registry.eligible(this.pool.model).length;
    const out = { concurrencyPerEngine: ready > 0 ? this.tickArea / dtMs / ready : 0, waiting: this.heldTotal() };
    if (dtMs >= this.spec.tickS * 1000) {
      this.tickArea = 0;
      this.lastTickAreaMs = now;
    }
    return out;
  }

  private checkGpus(): void {
    let used = 0;
    for (const n of this.nodes) {
      if (!n.up) continue;
      const u = n.sup.gpusUsed();
      used += u;
      if (u > n.gpus) this.violations.push(`host ${n.name} holds ${u} GPUs of ${n.gpus} at ${this.clock.now()} ms`);
    }
    const budget = this.spec.planner.gpuBudget;
    if (budget !== null && used > budget) this.violations.push(`${used} GPUs in use over the budget ${budget} at ${this.clock.now()} ms`);
  }
}
