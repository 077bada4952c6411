// The planner's decision (pure): `decide(nowMs, timeOfDayS, signals, fleet, config, memory)` →
// actions with a reason per pool, and the memory for the next tick. No I/O, no clock reads, no
// randomness: a seeded simulation replays a day of decisions exactly.
//
// Per pool, in a fixed order (pools sorted by id, so a shared GPU budget is spent the same way):
//  1. Missing or NaN signals → hold (`no_signal`); zero traffic is a real zero, not a missing one.
//  2. Need = ceil(max(stable-window mean, panic-window mean)) of the fractional demand (demand.ts),
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
import { engineDemand, floorAt, missingSignal, windowMax, windowMean } from "./demand.ts";
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
): { actions: Action[]; decision: PoolDecision; memory: PoolMemory } {
  const actions: Action[] = [];
  const of = (st: FleetEngine["state"]) => engines.filter((e) => e.state === st);
  const ready = of("ready");
  const coming = of("starting").length + of("waking").length;
  const current = ready.length + coming;
  const sleeping = of("sleeping");
  // Safety first, whatever else happens: drained engines with nothing left are stopped; long sleepers too.
  for (const e of of("draining")) if (e.inFlight === 0 && e.pendingTransfers === 0) actions.push({ kind: "stop", pool: pool.id, engine: e.id });
  for (const e of sleeping) if (nowMs - e.sinceMs >= cfg.sleepToStopMs) actions.push({ kind: "stop", pool: pool.id, engine: e.id });

  const floor = floorAt(pool, tod);
  const terms: Record<string, number | null> = { ready: ready.length, coming, sleeping: sleeping.length, floor, max: pool.max };
  const done = (desired: number, reason: Reason, memory: PoolMemory) => ({
    actions,
    decision: { pool: pool.id, desired, current, reason, terms },
    memory,
  });

  if (missingSignal(s)) return done(current, "no_signal", mem);
  const sig = s!;
  const busy = engines.some((e) => e.inFlight > 0 || e.pendingTransfers > 0);
  const idle = sig.arrivalsPerS === 0 && sig.heldRequests === 0 && !busy;
  const idleSinceMs = idle ? (mem.idleSinceMs ?? nowMs) : null;
  const demand = engineDemand(pool, sig, cfg.utilizationTarget);
  const keepMs = Math.max(cfg.stableWindowMs, cfg.downWindowMs, cfg.panicWindowMs);
  const samples = [...mem.samples.filter((x) => x.atMs > nowMs - keepMs), { atMs: nowMs, need: demand }];
  const stable = windowMean(samples, nowMs, cfg.stableWindowMs);
  const panic = windowMean(samples, nowMs, cfg.panicWindowMs);
  // Knative's panic mode: the short window only counts when it shows twice the capacity there is.
  const panicking = panic >= 2 * Math.max(1, current);
  let need = Math.ceil((panicking ? Math.max(stable, panic) : stable) - 1e-9);
  if (sig.heldRequests > 0) need = Math.max(need, 1);
  Object.assign(terms, { demand: round3(demand), stable: round3(stable), panic: round3(panic), need });
  const idleLong = idleSinceMs !== null && nowMs - idleSinceMs >= cfg.idleToSleepMs;

  let desired = Math.min(pool.max, Math.max(need, floor));
  let reason: Reason = "hold";
  if (pool.pinned !== null) {
    desired = pool.pinned;
    reason = "pinned";
  } else if (idleLong) desired = floor;
  const stableSamples = [...(mem.stableSamples ?? []).filter((x) => x.atMs > nowMs - keepMs), { atMs: nowMs, need: stable }];
  let next: PoolMemory = { ...mem, samples, stableSamples, idleSinceMs, samplingSinceMs: mem.samplingSinceMs ?? nowMs };

  if (desired > current) {
    let missing = desired - current;
    // Sleeping engines wake in seconds; a cold start takes tens of seconds or minutes.
    for (const e of [...sleeping].sort((a, b) => (a.id < b.id ? -1 : 1))) {
      if (missing === 0) break;
      actions.push({ kind: "wake", pool: pool.id, engine: e.id });
      missing--;
    }
    let limited: Reason | null = null;
    while (missing > 0) {
      const host = pickHost(pool, fleet, budget.free, nowMs);
      if (host === null) {
        limited = "gpu_budget";
        break;
      }
      if (!budget.spend(pool.gpusPerEngine)) {
        limited = "gpu_budget";
        break;
      }
      budget.free.set(host, (budget.free.get(host) ?? 0) - pool.gpusPerEngine);
      actions.push({ kind: "start", pool: pool.id, host });
      missing--;
    }
    const added = desired - current - missing;
    if (added > 0) next = { ...next, lastUpMs: nowMs };
    reason = reason === "pinned" ? "pinned" : limited ?? (sleeping.length > 0 && actions.some((a) => a.kind === "wake") ? "wake" : "scale_up");
    if (need > pool.max && reason === "scale_up") reason = "at_max";
    return done(desired, reason, next);
  }

  if (desired < current) {
    if (idleLong && reason !== "pinned") {
      // Idle: put the engines beyond the floor to sleep (or drain them to stop), quietest first.
      const surplus = current - desired;
      const victims = [...ready].sort(byVictimOrder).slice(0, surplus);
      for (const e of victims) {
        if (pool.canSleep && e.inFlight === 0 && e.pendingTransfers === 0) actions.push({ kind: "sleep", pool: pool.id, engine: e.id });
        else actions.push({ kind: "drain", pool: pool.id, engine: e.id });
      }
      return done(desired, pool.canSleep ? "sleep_idle" : "stop_idle", { ...next, lastDownMs: nowMs });
    }
    if (reason !== "pinned") {
      const window = windowMax(stableSamples, nowMs, cfg.downWindowMs, next.samplingSinceMs!);
      terms.down_window_max = round3(window.max);
      const consolidated = window.max <= (current - 1) * cfg.downHeadroom;
      if (nowMs - leaderSinceMs < cfg.downWindowMs) return done(current, "new_leader_window", next);
      if (mem.lastUpMs !== null && nowMs - mem.lastUpMs < cfg.upHoldMs) return done(current, "up_hold", next);
      if (mem.lastDownMs !== null && nowMs - mem.lastDownMs < cfg.downStepMs) return done(current, "hold", next);
      if (panicking || !window.covered || !consolidated) return done(current, "hold", next);
      // A pool that can sleep keeps its last engine for the idle rule: sleeping wakes in seconds,
      // a drained and stopped engine costs the next request a cold start.
      if (pool.canSleep && current - 1 < 1) return done(current, "hold", next);
    }
    const victim = pickVictim(ready);
    if (victim === null) return done(current, "drain_wait", next);
    actions.push({ kind: "drain", pool: pool.id, engine: victim.id });
    return done(current - 1, reason === "pinned" ? "pinned" : "scale_down", { ...next, lastDownMs: nowMs });
  }
  if (current > ready.length && desired === current) reason = "scale_up_pending";
  else if (desired === floor && floor > need && reason === "hold") reason = "floor";
  return done(desired, reason, next);
}

function byVictimOrder(a: FleetEngine, b: FleetEngine): number {
  return a.inFlight - b.inFlight || b.sinceMs - a.sinceMs || (a.id < b.id ? -1 : 1);
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
