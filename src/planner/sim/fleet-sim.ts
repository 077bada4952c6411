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

export function runFleetSim(spec: FleetSimSpec): SimScore & { actions: string[] } {
  const clock = new VirtualClock(0);
  const rng = new SeededRng(spec.seed);
  const startRng = rng.fork();
  const pool = spec.planner.pools[0]!;
  const registry = new WorkerRegistry();
  const router = new Router({ config: { ...defaultConfig().router, policy: "least-loaded" }, registry, clock, rng: rng.fork() });
  const engines = new Map<string, SimEngine>();
  const score = new Scorecard(spec.slo, pool.gpusPerEngine);
  const actionLog: string[] = [];
  const held: { isl: number; osl: number; atMs: number; deadline: { cancel(): void } }[] = [];
  let memory: PlannerMemory = { leaderSinceMs: 0, pools: {} };
  let seq = 0;
  // Counters since the last tick, for the signals.
  let arrivals = 0;
  let prefillTokens = 0;
  let decodeTokens = 0;
  let inFlightArea = 0;
  let lastAreaMs = 0;
  const totalInFlight = () => [...engines.values()].reduce((n, e) => n + e.inFlight, 0);
  const accrue = () => {
    const now = clock.now();
    inFlightArea += totalInFlight() * (now - lastAreaMs);
    lastAreaMs = now;
    score.gpuTick(now, [...engines.values()].filter((e) => e.state !== "stopped").length);
  };

  const setState = (e: SimEngine, state: FleetEngine["state"]) => {
    accrue();
    e.state = state;
    e.sinceMs = clock.now();
    if (state === "stopped") registry.remove(e.id);
    else registry.upsert({ id: e.id, node: e.host, model: pool.model, role: pool.role, kind: "sim", url: `sim://${e.id}`, state: state === "ready" ? "ready" : state === "draining" ? "draining" : "starting", restarts: 0, load: emptyLoad() });
    if (state === "ready") drainHeld();
  };

  const newEngine = (host: string, ready: boolean): SimEngine => {
    const e: SimEngine = { id: `e${seq++}`, pool: pool.id, host, state: "starting", inFlight: 0, pendingTransfers: 0, gpus: pool.gpusPerEngine, sinceMs: clock.now(), model: null, timer: null };
    engines.set(e.id, e);
    if (ready) {
      e.model = new EngineModel(spec.engine, clock.now());
      setState(e, "ready");
    } else setState(e, "starting");
    return e;
  };

  const pump = (e: SimEngine) => {
    e.timer?.cancel();
    e.timer = null;
    const at = e.model?.nextEventMs();
    if (at === null || at === undefined) return;
    e.timer = clock.setTimer(Math.max(0, at - clock.now()), () => {
      e.model!.advanceTo(clock.now());
      pump(e);
    });
  };

  const dispatch = (r: { isl: number; osl: number; arrivedMs: number }) => {
    let worker: string;
    let lease: Lease;
    try {
      const routed = router.routeAndBook({ model: pool.model, sessionId: null, promptTokens: r.isl, exclude: new Set() });
      worker = routed.worker.id;
      lease = routed.lease;
    } catch {
      return false;
    }
    const e = engines.get(worker)!;
    e.inFlight++;
    const rec = score.begin(r.arrivedMs, clock.now());
    e.model!.advanceTo(clock.now());
    e.model!.submit({
      isl: r.isl, osl: r.osl, arrivalMs: clock.now() + spec.engine.cost.requestMs,
      onFirstToken: (t) => {
        lease.firstToken();
        rec.firstTokenMs = t;
      },
      onFinish: (t) => {
        lease.release();
        e.inFlight--;
        score.finish(rec, t, r.osl);
      },
    });
    pump(e);
    return true;
  };

  const drainHeld = () => {
    while (held.length > 0) {
      const h = held[0]!;
      if (!dispatch({ isl: h.isl, osl: h.osl, arrivedMs: h.atMs })) return;
      held.shift();
      h.deadline.cancel();
      score.heldWait((clock.now() - h.atMs) / 1000);
    }
  };

  const arrive = (isl: number, osl: number) => {
    arrivals++;
    prefillTokens += isl;
    decodeTokens += osl;
    if (held.length === 0 && dispatch({ isl, osl, arrivedMs: clock.now() })) return;
    if (held.length >= spec.holdMax) return score.drop();
    const item = { isl, osl, atMs: clock.now(), deadline: { cancel() {} } };
    item.deadline = clock.setTimer(spec.holdTimeoutS * 1000, () => {
      const i = held.indexOf(item);
      if (i >= 0) held.splice(i, 1);
      score.drop();
    });
    held.push(item);
    // Wake on request: no waiting for the next tick.
    if (held.length === 1) tick(false);
  };

  const actuate = (a: Action) => {
    actionLog.push(`${(clock.now() / 1000).toFixed(1)} ${a.kind} ${"engine" in a ? a.engine : a.host}`);
    score.action(a.kind, clock.now());
    if (a.kind === "start") {
      const e = newEngine(a.host, false);
      const delayMs = spec.startMedianS * 1000 * lognormal(startRng, spec.startSigma) * Math.exp((spec.startSigma * spec.startSigma) / 2);
      clock.setTimer(delayMs, () => {
        if (e.state !== "starting") return;
        e.model = new EngineModel(spec.engine, clock.now());
        setState(e, "ready");
      });
      return;
    }
    const e = engines.get(a.engine);
    if (!e) return;
    if (a.kind === "wake") {
      setState(e, "waking");
      clock.setTimer(spec.wakeS * 1000, () => e.state === "waking" && setState(e, "ready"));
    } else if (a.kind === "sleep") {
      if (e.inFlight > 0) throw new Error(`invariant: engine ${e.id} put to sleep with ${e.inFlight} in flight at ${clock.now()} ms`);
      setState(e, "sleeping");
    } else if (a.kind === "drain") setState(e, "draining");
    else {
      if (e.inFlight > 0) throw new Error(`invariant: engine ${e.id} stopped with ${e.inFlight} in flight at ${clock.now()} ms`);
      e.timer?.cancel();
      setState(e, "stopped");
    }
  };

  const tick = (scheduled: boolean) => {
    accrue();
    const dt = Math.max(1, clock.now() - lastTickMs) / 1000;
    const ready = [...engines.values()].filter((e) => e.state === "ready").length;
    const signals = new Map([[pool.id, {
      arrivalsPerS: arrivals / dt, uncachedPrefillTokensPerS: prefillTokens / dt, decodeTokensPerS: decodeTokens / dt,
      heldRequests: held.length, heldTokens: held.reduce((n, h) => n + h.isl, 0),
      concurrencyPerEngine: ready > 0 ? inFlightArea / (dt * 1000) / ready : 0, waiting: held.length,
    }]]);
    const fleet: Fleet = { engines: [...engines.values()].filter((e) => e.state !== "stopped"), hosts: spec.hosts.map((h) => ({ name: h.name, gpusTotal: h.gpus, backoffUntilMs: 0, gpusFree: h.gpus - [...engines.values()].filter((e) => e.host === h.name && e.state !== "stopped").length * pool.gpusPerEngine })) };
    const d = spec.law.decide(clock.now(), (clock.now() / 1000) % 86_400, signals, fleet, spec.planner, memory);
    memory = d.memory;
    for (const a of d.actions) actuate(a);
    // Invariant: the GPU budget and every host's GPUs hold after the actions.
    const used = [...engines.values()].filter((e) => e.state !== "stopped").length * pool.gpusPerEngine;
    if (spec.planner.gpuBudget !== null && used > spec.planner.gpuBudget) throw new Error(`invariant: ${used} GPUs in use over the budget ${spec.planner.gpuBudget} at ${clock.now()} ms`);
    if (scheduled) {
      arrivals = prefillTokens = decodeTokens = inFlightArea = 0;
      lastTickMs = clock.now();
      if (clock.now() < spec.durationS * 1000 || totalInFlight() > 0 || held.length > 0) clock.setTimer(spec.tickS * 1000, () => tick(true));
    }
  };
  let lastTickMs = 0;

  for (let i = 0; i < spec.initialEngines; i++) newEngine(spec.hosts[i % spec.hosts.length]!.name, true);
  const it = shapedArrivals(spec.shape, spec.durationS, rng.fork());
  const next = () => {
    const n = it.next();
    if (n.done) return;
    clock.setTimer(n.value.atS * 1000 - clock.now(), () => {
      arrive(n.value.isl, n.value.osl);
      next();
    });
  };
  next();
  clock.setTimer(spec.tickS * 1000, () => tick(true));
  while (clock.step()) {
    // every event runs inside step()
  }
  accrue();
  for (const h of held) score.drop(), h.deadline.cancel();
  return { ...score.result(clock.now()), actions: actionLog };
}
