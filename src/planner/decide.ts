// The planner's decision (pure): `decide(nowMs, timeOfDayS, signals, fleet, config, memory)` →
// actions with a reason per pool, and the memory for the next tick. No I/O, no clock reads, no
// randomness: a seeded simulation replays a day of decisions exactly.
//
// Per pool, in a fixed order (pools sorted by id, so a shared GPU budget is spent the same way):
//  1. Missing or NaN signals → hold (`no_signal`); zero traffic is a real zero, not a missing one.
//  2. Need = ceil(max(stable-window mean, panic-window mean)) of the fractional demand (demand.ts;
//     in SLA mode, planner.slo, sla.ts: the stable figure is the demand of the predicted load at
//     the latency targets, the panic window's samples the demand of each window's own load),
//     at least 1 while requests are held; clamped to [floor, max] (floor = min or the time-of-day
//     floor); a pin overrides it. Idle (nothing arriving, held or in flight) for idleToSleepMs → the
//     floor.
//  3. Up at once to the need, counting engines already starting or waking (no cascade while they
//     warm up: AIBrix #2670, llm-d "credit"); wake sleeping engines before cold starts.
//  4. Down one engine at a time, only when one fewer engine would stay under downHeadroom × target
//     for the whole down window (the N/(N−1) consolidation that Dynamo #9294's 2↔1 flap ignored),
//     not within upHoldMs of an addition, not within downStepMs of the last removal, and not before
//     a new leader has watched one down window. A removed engine is drained first; it is stopped
//     only once nothing is in flight on it and it owes no KV transfer.
import { DEFAULT_FIGURES } from "./capacity.ts";
import { engineDemand, floorAt, missingSignal, windowMax, windowMean } from "./demand.ts";
import { slaDemand } from "./sla.ts";
import { pickHost, pickVictim } from "./placement.ts";
import type { Action, Decision, Fleet, FleetEngine, PlannerConfig, PlannerMemory, PoolDecision, PoolMemory, PoolSignals, PoolSpec, Reason } from "./types.ts";

export function initialMemory(nowMs: number): PlannerMemory {
  return { leaderSinceMs: nowMs, pools: {} };
}

const EMPTY_POOL: PoolMemory = { samples: [], samplingSinceMs: null, lastUpMs: null, lastDownMs: null, idleSinceMs: null };

export function decide(
  nowMs: number,
  timeOfDayS: number,
  signals: ReadonlyMap<string, PoolSignals>,
  fleet: Fleet,
  cfg: PlannerConfig,
  memory: PlannerMemory,
): Decision {
  const actions: Action[] = [];
  const pools: PoolDecision[] = [];
  const nextPools: Record<string, PoolMemory> = {};
  // GPUs still free per host and in the cluster budget, spent as starts are planned.
  const free = new Map(fleet.hosts.map((h) => [h.name, h.gpusFree]));
  const used = fleet.engines.filter((e) => e.state !== "stopped").reduce((n, e) => n + e.gpus, 0);
  let budgetLeft = cfg.gpuBudget === null ? Infinity : cfg.gpuBudget - used;

  for (const pool of [...cfg.pools].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    const engines = fleet.engines.filter((e) => e.pool === pool.id && e.state !== "stopped");
    const mem = memory.pools[pool.id] ?? EMPTY_POOL;
    const r = decidePool(nowMs, timeOfDayS, pool, signals.get(pool.id), engines, fleet, cfg, mem, memory.leaderSinceMs, {
      free,
      spend: (gpus) => {
        if (budgetLeft < gpus) return false;
        budgetLeft -= gpus;
        return true;
      },
    });
    actions.push(...r.actions);
    pools.push(r.decision);
    nextPools[pool.id] = r.memory;
  }
  return { actions, pools, memory: { leaderSinceMs: memory.leaderSinceMs, pools: nextPools } };
}

interface Budget {
  free: Map<string, number>;
  spend(gpus: number): boolean;
}

/** One pool's tick: what it has, what it needs, and the decision being built. */
interface PoolTick {
  nowMs: number;
  pool: PoolSpec;
  cfg: PlannerConfig;
  fleet: Fleet;
  mem: PoolMemory;
  ready: FleetEngine[];
  sleeping: FleetEngine[];
  /** ready + starting + waking: engines serving or about to. */
  current: number;
  floor: number;
  actions: Action[];
  terms: Record<string, number | null>;
  /** SLA mode: the sizing term by term. */
  explain?: string;
}

/** What the signals say the pool needs, and the next memory's samples. */
interface Need {
  need: number;
  desired: number;
  reason: Reason;
  panicking: boolean;
  idleLong: boolean;
  stableSamples: { atMs: number; need: number }[];
  next: PoolMemory;
}

type PoolResult = { actions: Action[]; decision: PoolDecision; memory: PoolMemory };

function decidePool(
  nowMs: number,
  tod: number,
  pool: PoolSpec,
  s: PoolSignals | undefined,
  engines: readonly FleetEngine[],
  fleet: Fleet,
  cfg: PlannerConfig,
  mem: PoolMemory,
  leaderSinceMs: number,
  budget: Budget,
): PoolResult {
  const of = (st: FleetEngine["state"]) => engines.filter((e) => e.state === st);
  const ready = of("ready");
  const sleeping = of("sleeping");
  const coming = of("starting").length + of("waking").length;
  const floor = floorAt(pool, tod);
  const t: PoolTick = {
    nowMs, pool, cfg, fleet, mem, ready, sleeping, current: ready.length + coming, floor, actions: [],
    terms: { ready: ready.length, coming, sleeping: sleeping.length, floor, max: pool.max },
  };
  // Safety first, whatever else happens: drained engines with nothing left are stopped; long sleepers too.
  for (const e of of("draining")) if (e.inFlight === 0 && e.pendingTransfers === 0) t.actions.push({ kind: "stop", pool: pool.id, engine: e.id });
  for (const e of sleeping) if (nowMs - e.sinceMs >= cfg.sleepToStopMs) t.actions.push({ kind: "stop", pool: pool.id, engine: e.id });
  if (missingSignal(s)) return done(t, t.current, "no_signal", mem);
  const n = measureNeed(t, s!, engines);
  if (n.desired > t.current) return scaleUp(t, n, budget);
  if (n.desired < t.current) return n.idleLong && n.reason !== "pinned" ? idleDown(t, n) : scaleDown(t, n, leaderSinceMs);
  const reason = t.current > ready.length ? "scale_up_pending" : n.desired === floor && floor > n.need && n.reason === "hold" ? "floor" : n.reason;
  return done(t, n.desired, reason, n.next);
}

function done(t: PoolTick, desired: number, reason: Reason, memory: PoolMemory): PoolResult {
  const decision: PoolDecision = { pool: t.pool.id, desired, current: t.current, reason, terms: t.terms, ...(t.explain !== undefined ? { explain: t.explain } : {}) };
  return { actions: t.actions, decision, memory };
}

/** Demand → engines: stable and panic windows, held requests, floor, pin, idle. */
function measureNeed(t: PoolTick, sig: PoolSignals, engines: readonly FleetEngine[]): Need {
  const { nowMs, cfg, pool, mem } = t;
  const busy = engines.some((e) => e.inFlight > 0 || e.pendingTransfers > 0);
  const idle = sig.arrivalsPerS === 0 && sig.heldRequests === 0 && !busy;
  const idleSinceMs = idle ? (mem.idleSinceMs ?? nowMs) : null;
  const sla = cfg.slo ? slaDemand(nowMs, pool, sig, cfg.slo, t.ready.length, pool.engine ?? DEFAULT_FIGURES, mem.sla) : null;
  const demand = sla ? sla.demand : engineDemand(pool, sig, cfg.utilizationTarget);
  const keepMs = Math.max(cfg.stableWindowMs, cfg.downWindowMs, cfg.panicWindowMs);
  const samples = [...mem.samples.filter((x) => x.atMs > nowMs - keepMs), { atMs: nowMs, need: sla ? sla.panic : demand }];
  // SLA mode: the predictor already smooths (and leads); the panic window still catches a burst.
  const stable = sla ? sla.demand : windowMean(samples, nowMs, cfg.stableWindowMs);
  const panic = windowMean(samples, nowMs, cfg.panicWindowMs);
  if (sla) {
    Object.assign(t.terms, sla.terms);
    t.explain = sla.explain;
  }
  // Knative's panic mode: the short window only counts when it shows twice the capacity there is.
  const panicking = panic >= 2 * Math.max(1, t.current);
  let need = Math.ceil((panicking ? Math.max(stable, panic) : stable) - 1e-9);
  if (sig.heldRequests > 0) need = Math.max(need, 1);
  Object.assign(t.terms, { demand: round3(demand), stable: round3(stable), panic: round3(panic), need });
  const idleLong = idleSinceMs !== null && nowMs - idleSinceMs >= cfg.idleToSleepMs;
  let desired = Math.min(pool.max, Math.max(need, t.floor));
  let reason: Reason = "hold";
  if (pool.pinned !== null) {
    desired = pool.pinned;
    reason = "pinned";
  } else if (idleLong) desired = t.floor;
  const stableSamples = [...(mem.stableSamples ?? []).filter((x) => x.atMs > nowMs - keepMs), { atMs: nowMs, need: stable }];
  const next: PoolMemory = { ...mem, samples, stableSamples, idleSinceMs, samplingSinceMs: mem.samplingSinceMs ?? nowMs, ...(sla ? { sla: sla.memory } : {}) };
  return { need, desired, reason, panicking, idleLong, stableSamples, next };
}

/** Up at once: wake sleepers first (seconds), then cold starts on hosts with free GPUs. */
function scaleUp(t: PoolTick, n: Need, budget: Budget): PoolResult {
  const { pool } = t;
  let missing = n.desired - t.current;
  for (const e of [...t.sleeping].sort((a, b) => (a.id < b.id ? -1 : 1))) {
    if (missing === 0) break;
    t.actions.push({ kind: "wake", pool: pool.id, engine: e.id });
    missing--;
  }
  let limited: Reason | null = null;
  while (missing > 0) {
    const host = pickHost(pool, t.fleet, budget.free, t.nowMs);
    if (host === null || !budget.spend(pool.gpusPerEngine)) {
      limited = "gpu_budget";
      break;
    }
    budget.free.set(host, (budget.free.get(host) ?? 0) - pool.gpusPerEngine);
    t.actions.push({ kind: "start", pool: pool.id, host });
    missing--;
  }
  const next = n.desired - t.current - missing > 0 ? { ...n.next, lastUpMs: t.nowMs } : n.next;
  let reason: Reason = n.reason === "pinned" ? "pinned" : limited ?? (t.actions.some((a) => a.kind === "wake") ? "wake" : "scale_up");
  if (n.need > pool.max && reason === "scale_up") reason = "at_max";
  return done(t, n.desired, reason, next);
}

/** Idle: the engines beyond the floor go to sleep (or are drained to stop), quietest first. */
function idleDown(t: PoolTick, n: Need): PoolResult {
  const { pool } = t;
  for (const e of [...t.ready].sort(byVictimOrder).slice(0, t.current - n.desired)) {
    if (pool.canSleep && e.inFlight === 0 && e.pendingTransfers === 0) t.actions.push({ kind: "sleep", pool: pool.id, engine: e.id });
    else t.actions.push({ kind: "drain", pool: pool.id, engine: e.id });
  }
  return done(t, n.desired, pool.canSleep ? "sleep_idle" : "stop_idle", { ...n.next, lastDownMs: t.nowMs });
}

/** Down one engine, only when the consolidated pool stays under the headroom for the whole window. */
function scaleDown(t: PoolTick, n: Need, leaderSinceMs: number): PoolResult {
  const { nowMs, cfg, mem, pool, current } = t;
  if (n.reason !== "pinned") {
    const window = windowMax(n.stableSamples, nowMs, cfg.downWindowMs, n.next.samplingSinceMs!);
    t.terms.down_window_max = round3(window.max);
    const consolidated = window.max <= (current - 1) * cfg.downHeadroom;
    if (nowMs - leaderSinceMs < cfg.downWindowMs) return done(t, current, "new_leader_window", n.next);
    if (mem.lastUpMs !== null && nowMs - mem.lastUpMs < cfg.upHoldMs) return done(t, current, "up_hold", n.next);
    if (mem.lastDownMs !== null && nowMs - mem.lastDownMs < cfg.downStepMs) return done(t, current, "hold", n.next);
    if (n.panicking || !window.covered || !consolidated) return done(t, current, "hold", n.next);
    // A pool that can sleep keeps its last engine for the idle rule: sleeping wakes in seconds,
    // a drained and stopped engine costs the next request a cold start.
    if (pool.canSleep && current - 1 < 1) return done(t, current, "hold", n.next);
  }
  const victim = pickVictim(t.ready);
  if (victim === null) return done(t, current, "drain_wait", n.next);
  t.actions.push({ kind: "drain", pool: pool.id, engine: victim.id });
  return done(t, current - 1, n.reason === "pinned" ? "pinned" : "scale_down", { ...n.next, lastDownMs: nowMs });
}

function byVictimOrder(a: FleetEngine, b: FleetEngine): number {
  return a.inFlight - b.inFlight || b.sinceMs - a.sinceMs || (a.id < b.id ? -1 : 1);
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
