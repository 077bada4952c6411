// A day of one pool on the virtual clock: offered load (src/workload/rate-shapes.ts) → herd's real
// Router (least-loaded over the ready engines) → engine models (engine-model.ts), with a planner law
// (herd's decide(), static peak provisioning, or an emulated anchor: laws.ts) scaling the pool
// through the actions an actuator would carry out: cold starts with a long-tailed latency, wakes,
// drains, stops. Requests for a pool with no ready engine are held in a bounded queue with a
// deadline and poke the planner at once. Every tick checks the invariants the issue names; a
// violation throws with the tick's time. Seeded: one seed gives one action log.
import { VirtualClock } from "../../core/clock.ts";
import { SeededRng } from "../../core/rng.ts";
import { defaultConfig } from "../../config/index.ts";
import { DEFAULT_COST } from "../../engine/sim/cost.ts";
import { Router } from "../../router/index.ts";
import type { Lease } from "../../router/index.ts";
import { WorkerRegistry } from "../../workers/registry.ts";
import { emptyLoad } from "../../workers/worker.ts";
import { lognormal, shapedArrivals, type RateShape } from "../../workload/rate-shapes.ts";
import type { Action, Decision, Fleet, FleetEngine, PlannerConfig, PlannerMemory, PoolSignals } from "../types.ts";
import { EngineModel, type EngineModelParams } from "./engine-model.ts";
import { Scorecard, type SimScore } from "./score.ts";

/** A planner under test: herd's decide() or an emulated rule, same inputs, same outputs. */
export interface PlannerLaw {
  name: string;
  decide(nowMs: number, timeOfDayS: number, signals: ReadonlyMap<string, PoolSignals & LawExtras>, fleet: Fleet, cfg: PlannerConfig, memory: PlannerMemory): Decision;
}

/** What the emulated anchors read besides herd's signals (concurrency and queue, as HPA/KPA see them). */
export interface LawExtras {
  /** Mean requests in flight per ready engine over the last tick. */
  concurrencyPerEngine: number;
  /** Requests waiting inside the engines (queued, not yet prefilling). */
  waiting: number;
}

export interface FleetSimSpec {
  shape: RateShape;
  durationS: number;
  seed: number;
  planner: PlannerConfig;
  law: PlannerLaw;
  hosts: { name: string; gpus: number }[];
  engine: EngineModelParams;
  /** Cold start: median seconds and lognormal sigma (a long tail). */
  startMedianS: number;
  startSigma: number;
  wakeS: number;
  tickS: number;
  holdMax: number;
  holdTimeoutS: number;
  slo: { ttftS: number; itlS: number };
  /** Engines ready at t = 0 (before the first tick). */
  initialEngines: number;
}

export const DEFAULT_ENGINE: EngineModelParams = { cost: DEFAULT_COST, maxNumSeqs: 256, maxBatchedTokens: 8192, kvTokens: 395_200 };

interface SimEngine extends FleetEngine {
  model: EngineModel | null;
  timer: { cancel(): void } | null;
}

interface Held {
  isl: number;
  osl: number;
  atMs: number;
  deadline: { cancel(): void };
}

export function runFleetSim(spec: FleetSimSpec): SimScore & { mean_in_flight: number; actions: string[] } {
  return new FleetSim(spec).run();
}

/** One simulated run; the state of the fleet, the hold queue and the counters of the current tick. */
class FleetSim {
  private readonly clock = new VirtualClock(0);
  private readonly rng: SeededRng;
  private readonly startRng: SeededRng;
  private readonly pool;
  private readonly registry = new WorkerRegistry();
  private readonly router: Router;
  private readonly engines = new Map<string, SimEngine>();
  private readonly score: Scorecard;
  private readonly actionLog: string[] = [];
  private readonly held: Held[] = [];
  private memory: PlannerMemory = { leaderSinceMs: 0, pools: {} };
  private seq = 0;
  // Counters since the last tick, for the signals.
  private arrivals = 0;
  private prefillTokens = 0;
  private decodeTokens = 0;
  private inFlightArea = 0;
  private lastAreaMs = 0;
  private lastTickMs = 0;
  /** Requests in flight × ms over the whole run (Little's law: the mean concurrency). */
  private totalArea = 0;

  constructor(private readonly spec: FleetSimSpec) {
    this.rng = new SeededRng(spec.seed);
    this.startRng = this.rng.fork() as SeededRng;
    this.pool = spec.planner.pools[0]!;
    this.router = new Router({ config: { ...defaultConfig().router, policy: "least-loaded" }, registry: this.registry, clock: this.clock, rng: this.rng.fork() });
    this.score = new Scorecard(spec.slo, this.pool.gpusPerEngine);
  }

  run(): SimScore & { mean_in_flight: number; actions: string[] } {
    const { spec, clock } = this;
    for (let i = 0; i < spec.initialEngines; i++) this.newEngine(spec.hosts[i % spec.hosts.length]!.name, true);
    const it = shapedArrivals(spec.shape, spec.durationS, this.rng.fork());
    const next = () => {
      const n = it.next();
      if (n.done) return;
      clock.setTimer(n.value.atS * 1000 - clock.now(), () => {
        this.arrive(n.value.isl, n.value.osl);
        next();
      });
    };
    next();
    clock.setTimer(spec.tickS * 1000, () => this.tick(true));
    while (clock.step()) {
      // every event runs inside step()
    }
    this.accrue();
    for (const h of this.held) this.score.drop(), h.deadline.cancel();
    return { ...this.score.result(clock.now()), mean_in_flight: clock.now() > 0 ? this.totalArea / clock.now() : 0, actions: this.actionLog };
  }

  private live(): SimEngine[] {
    return [...this.engines.values()].filter((e) => e.state !== "stopped");
  }

  private totalInFlight(): number {
    let n = 0;
    for (const e of this.engines.values()) n += e.inFlight;
    return n;
  }

  private accrue(): void {
    const now = this.clock.now();
    const area = this.totalInFlight() * (now - this.lastAreaMs);
    this.inFlightArea += area;
    this.totalArea += area;
    this.lastAreaMs = now;
    this.score.gpuTick(now, this.live().length);
  }

  private setState(e: SimEngine, state: FleetEngine["state"]): void {
    this.accrue();
    e.state = state;
    e.sinceMs = this.clock.now();
    if (state === "stopped") this.registry.remove(e.id);
    else {
      const routed = state === "ready" ? "ready" : state === "draining" ? "draining" : "starting";
      this.registry.upsert({ id: e.id, node: e.host, model: this.pool.model, role: this.pool.role, kind: "sim", url: `sim://${e.id}`, state: routed, restarts: 0, load: emptyLoad() });
    }
    if (state === "ready") this.drainHeld();
  }

  private newEngine(host: string, ready: boolean): SimEngine {
    const e: SimEngine = { id: `e${this.seq++}`, pool: this.pool.id, host, state: "starting", inFlight: 0, pendingTransfers: 0, gpus: this.pool.gpusPerEngine, sinceMs: this.clock.now(), model: null, timer: null };
    this.engines.set(e.id, e);
    if (ready) e.model = new EngineModel(this.spec.engine, this.clock.now());
    this.setState(e, ready ? "ready" : "starting");
    return e;
  }

  /** Schedule the engine model's next event on the clock. */
  private pump(e: SimEngine): void {
    e.timer?.cancel();
    e.timer = null;
    const at = e.model?.nextEventMs();
    if (at === null || at === undefined) return;
    e.timer = this.clock.setTimer(Math.max(0, at - this.clock.now()), () => {
      e.model!.advanceTo(this.clock.now());
      this.pump(e);
    });
  }

  /** Route and submit one request; false when no engine is ready (the caller holds it). */
  private dispatch(r: { isl: number; osl: number; arrivedMs: number }): boolean {
    const { clock } = this;
    let worker: string;
    let lease: Lease;
    try {
      const routed = this.router.routeAndBook({ model: this.pool.model, sessionId: null, promptTokens: r.isl, exclude: new Set() });
      worker = routed.worker.id;
      lease = routed.lease;
    } catch {
      return false;
    }
    const e = this.engines.get(worker)!;
    e.inFlight++;
    const rec = this.score.begin(r.arrivedMs, clock.now());
    e.model!.advanceTo(clock.now());
    e.model!.submit({
      isl: r.isl, osl: r.osl, arrivalMs: clock.now() + this.spec.engine.cost.requestMs,
      onFirstToken: (t) => {
        lease.firstToken();
        rec.firstTokenMs = t;
      },
      onFinish: (t) => {
        lease.release();
        e.inFlight--;
        this.score.finish(rec, t, r.osl);
      },
    });
    this.pump(e);
    return true;
  }

  private drainHeld(): void {
    while (this.held.length > 0) {
      const h = this.held[0]!;
      if (!this.dispatch({ isl: h.isl, osl: h.osl, arrivedMs: h.atMs })) return;
      this.held.shift();
      h.deadline.cancel();
      this.score.heldWait((this.clock.now() - h.atMs) / 1000);
    }
  }

  private arrive(isl: number, osl: number): void {
    this.arrivals++;
    this.prefillTokens += isl;
    this.decodeTokens += osl;
    if (this.held.length === 0 && this.dispatch({ isl, osl, arrivedMs: this.clock.now() })) return;
    if (this.held.length >= this.spec.holdMax) return this.score.drop();
    const item: Held = { isl, osl, atMs: this.clock.now(), deadline: { cancel() {} } };
    item.deadline = this.clock.setTimer(this.spec.holdTimeoutS * 1000, () => {
      const i = this.held.indexOf(item);
      if (i >= 0) this.held.splice(i, 1);
      this.score.drop();
    });
    this.held.push(item);
    // Wake on request: no waiting for the next tick.
    if (this.held.length === 1) this.tick(false);
  }

  private actuate(a: Action): void {
    const { clock, spec } = this;
    this.actionLog.push(`${(clock.now() / 1000).toFixed(1)} ${a.kind} ${"engine" in a ? a.engine : a.host}`);
    this.score.action(a.kind, clock.now());
    if (a.kind === "start") {
      const e = this.newEngine(a.host, false);
      const delayMs = spec.startMedianS * 1000 * lognormal(this.startRng, spec.startSigma) * Math.exp((spec.startSigma * spec.startSigma) / 2);
      clock.setTimer(delayMs, () => {
        if (e.state !== "starting") return;
        e.model = new EngineModel(spec.engine, clock.now());
        this.setState(e, "ready");
      });
      return;
    }
    const e = this.engines.get(a.engine);
    if (!e) return;
    if (a.kind === "wake") {
      this.setState(e, "waking");
      clock.setTimer(spec.wakeS * 1000, () => e.state === "waking" && this.setState(e, "ready"));
    } else if (a.kind === "sleep") {
      if (e.inFlight > 0) throw new Error(`invariant: engine ${e.id} put to sleep with ${e.inFlight} in flight at ${clock.now()} ms`);
      this.setState(e, "sleeping");
    } else if (a.kind === "drain") this.setState(e, "draining");
    else {
      if (e.inFlight > 0) throw new Error(`invariant: engine ${e.id} stopped with ${e.inFlight} in flight at ${clock.now()} ms`);
      e.timer?.cancel();
      this.setState(e, "stopped");
    }
  }

  private signals(): Map<string, PoolSignals & LawExtras> {
    const dt = Math.max(1, this.clock.now() - this.lastTickMs) / 1000;
    const ready = [...this.engines.values()].filter((e) => e.state === "ready").length;
    return new Map([[this.pool.id, {
      arrivalsPerS: this.arrivals / dt, uncachedPrefillTokensPerS: this.prefillTokens / dt, decodeTokensPerS: this.decodeTokens / dt,
      heldRequests: this.held.length, heldTokens: this.held.reduce((n, h) => n + h.isl, 0),
      concurrencyPerEngine: ready > 0 ? this.inFlightArea / (dt * 1000) / ready : 0, waiting: this.held.length,
    }]]);
  }

  private fleet(): Fleet {
    const engines = this.live();
    const hosts = this.spec.hosts.map((h) => ({
      name: h.name, gpusTotal: h.gpus, backoffUntilMs: 0,
      gpusFree: h.gpus - engines.filter((e) => e.host === h.name).length * this.pool.gpusPerEngine,
    }));
    return { engines, hosts };
  }

  /** One planner decision: scheduled every tickS, or at once when a request is held (a poke). */
  private tick(scheduled: boolean): void {
    const { clock, spec } = this;
    this.accrue();
    const d = spec.law.decide(clock.now(), (clock.now() / 1000) % 86_400, this.signals(), this.fleet(), spec.planner, this.memory);
    this.memory = d.memory;
    for (const a of d.actions) this.actuate(a);
    // Invariant: the GPU budget holds after the actions.
    const used = this.live().length * this.pool.gpusPerEngine;
    if (spec.planner.gpuBudget !== null && used > spec.planner.gpuBudget) throw new Error(`invariant: ${used} GPUs in use over the budget ${spec.planner.gpuBudget} at ${clock.now()} ms`);
    if (!scheduled) return;
    this.arrivals = this.prefillTokens = this.decodeTokens = this.inFlightArea = 0;
    this.lastTickMs = clock.now();
    if (clock.now() < spec.durationS * 1000 || this.totalInFlight() > 0 || this.held.length > 0) clock.setTimer(spec.tickS * 1000, () => this.tick(true));
  }
}
