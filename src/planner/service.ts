// PlannerService: the planner's imperative shell on one node (a Service the daemon runs after the
// supervisor). Every planner.tick_ms — or at once when poked by the hold queue's first request for
// a pool — it turns what herd's data path saw since the last tick (recordArrival: arrivals, prompt
// and decode tokens per pool; the hold queue's requests) and the actuator's fleet into signals,
// calls the pure decide(), and hands the actions to the Actuator (or, in dry-run, logs them). Held
// requests are released as soon as an engine of their pool is ready. status() is GET /admin/planner.
import type { Clock, TimerHandle } from "../core/clock.ts";
import { wallClockMs } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Service } from "../core/service.ts";
import type { Config, Role } from "../config/types.ts";
import { describeAction, type Actuator } from "./actuator.ts";
import { decide, initialMemory } from "./decide.ts";
import { plannerConfigFrom } from "./from-config.ts";
import { HoldQueue } from "./hold.ts";
import { holdPoolOf, latencyMean, poolsOfModel } from "./signals.ts";
import type { PlannerMetrics } from "./metrics.ts";
import type { Action, Decision, Fleet, PlannerConfig, PlannerMemory, PoolSignals } from "./types.ts";
import { plannerStatus, type PlannerStatus, type RecentAction } from "./status.ts";

/** Decode tokens assumed for a request without max_tokens (an estimate until outputs are counted). */
export const DEFAULT_DECODE_TOKENS = 256;
const RECENT_ACTIONS_MAX = 50;

export interface PlannerServiceOptions {
  config: Config;
  clock: Clock;
  log: Logger;
  actuator: Actuator;
  metrics?: PlannerMetrics | null;
  /** GPUs one engine of an engines[] entry takes (engine/scale.ts gpusPerEngine); default 0. */
  gpusPerEngine?: (entryIndex: number) => number;
  /** Seconds since local midnight, for time-of-day floors (default: this host's local time). */
  timeOfDayS?: () => number;
  /** The pools and thresholds (default: from config.planner); the simulator passes its calibrated capacity. */
  plannerConfig?: PlannerConfig;
  /** The decision (default herd's decide()); the simulator passes the emulated anchors' rules. */
  decide?: DecideFn;
  /** More per-pool figures for the decision (the emulated anchors read concurrency and queue). */
  extraSignals?: (pool: string, dtS: number) => Record<string, number>;
  /**
   * One planner for the cluster (cluster-plan.ts): only the leader decides, over every node's
   * signals and fleet, and acts through assignments stamped with its term. Without it this node
   * plans alone over its own actuator.
   */
  cluster?: ClusterScope | null;
  /** Whether `pool` has a ready engine anywhere this node can route to (default: in its own actuator's fleet). */
  hasReady?: (pool: string) => boolean;
}

export type DecideFn = typeof decide;

/** What the service needs from the cluster to plan for it (cluster-plan.ts ClusterPlanning implements it). */
export interface ClusterScope {
  /** The term this node leads in with a fresh lease; null on a follower (or a leader without quorum). */
  leading(): number | null;
  /** Cluster-wide signals and fleet at `term`; a string (why not) until the new leader observed a full window. */
  observe(nowMs: number, term: number): { signals: Map<string, PoolSignals>; fleet: Fleet } | string;
  /** Where the leader's actions go: assignments to the nodes, stamped with `term`. */
  actuator(term: number): Actuator;
  /** The leader's node name (for status). */
  leader(): string | null;
  /** A follower holds requests: tell the leader now (push this node's summary, poke it); null = wait for its pull. */
  nudge: (() => void) | null;
  /** This follower has not heard from a leader for a while (none known, or no pull or assignment lately). */
  cutOff(): boolean;
}

/** Cumulative counts per pool since start (the node summary carries them; the leader takes differences). */
export interface PoolTotals {
  arrivals: number;
  promptTokens: number;
  decodeTokens: number;
  /** Finished requests' TTFT and ITL (ms), summed, and how many (SLA mode's measured latency; absent from an older herd). */
  ttftCount?: number;
  ttftMsSum?: number;
  itlCount?: number;
  itlMsSum?: number;
}

type Counts = Required<PoolTotals>;

const zeroCounts = (): Counts => ({ arrivals: 0, promptTokens: 0, decodeTokens: 0, ttftCount: 0, ttftMsSum: 0, itlCount: 0, itlMsSum: 0 });


export class PlannerService implements Service {
  readonly name = "planner";
  readonly hold: HoldQueue;
  readonly plannerConfig: PlannerConfig;
  private memory: PlannerMemory;
  private counts = new Map<string, Counts>();
  private readonly totals = new Map<string, Counts>();
  /** The term this planner last decided in (cluster): a new term starts a new memory. */
  private leaderTerm: number | null = null;
  private waitingWhy: string | null = null;
  private lastTickMs: number;
  private timer: TimerHandle | null = null;
  private pokeTimer: TimerHandle | null = null;
  private running = false;
  private unwatch: (() => void) | null = null;
  private last: Decision | null = null;
  private lastTickAtMs: number | null = null;
  private ticks = 0;
  private readonly recent: RecentAction[] = [];
  private readonly log: Logger;
  private readonly pending = new Set<Promise<unknown>>();

  constructor(private readonly o: PlannerServiceOptions) {
    this.log = o.log.child("planner");
    this.plannerConfig = o.plannerConfig ?? plannerConfigFrom(o.config, o.gpusPerEngine ?? (() => 0));
    this.memory = initialMemory(o.clock.now());
    this.lastTickMs = o.clock.now();
    const p = o.config.planner;
    this.hold = new HoldQueue({
      clock: o.clock, maxCount: p.hold_max, maxBytes: p.hold_max_bytes, timeoutMs: p.hold_timeout_ms,
      poke: () => this.poke(), predictReadyMs: (pool) => o.actuator.predictReadyMs(pool),
      onReject: (pool, why) => o.metrics?.holdRejected(pool, why), onRelease: (pool, ms) => o.metrics?.holdReleased(pool, ms),
    });
  }

  get enabled(): boolean {
    return this.o.config.planner.enabled;
  }

  start(): void {
    if (!this.enabled || this.running) return;
    this.running = true;
    // A new leader (here: a new herd) recomputes from the fleet and waits a down window before removing.
    this.memory = initialMemory(this.o.clock.now());
    this.lastTickMs = this.o.clock.now();
    this.unwatch = this.o.actuator.watch(() => this.releaseReady());
    this.schedule();
    this.log.info("planner started", { pools: this.plannerConfig.pools.map((p) => p.id).join(","), tick_ms: this.o.config.planner.tick_ms, dry_run: this.o.config.planner.dry_run });
  }

  async stop(): Promise<void> {
    this.running = false;
    this.timer?.cancel();
    this.pokeTimer?.cancel();
    this.timer = this.pokeTimer = null;
    this.unwatch?.();
    this.unwatch = null;
    this.hold.close();
    await Promise.allSettled([...this.pending]);
  }

  /** The planner pool of `model` and `role`; null when the planner does not scale it. */
  poolFor(model: string, role: Role = "aggregated"): string | null {
    const id = `${model}/${role}`;
    return this.plannerConfig.pools.some((p) => p.id === id) ? id : null;
  }

  /** Every planner pool a request for `model` is work for (P/D: its prefill and its decode pool). */
  poolsFor(model: string): string[] {
    return poolsOfModel(this.poolIds, model).map((p) => p.pool);
  }

  /** The pool a request for `model` waits for when nothing serves it (signals.ts holdPoolOf). */
  holdPoolFor(model: string): string | null {
    return holdPoolOf(this.poolIds, model);
  }

  private get poolIds(): string[] {
    return this.plannerConfig.pools.map((p) => p.id);
  }

  /** The frontend's hook, once per admitted request, before any queue: what the pool is asked to do. */
  recordArrival(pool: string, promptTokens: number, maxTokens: number | null): void {
    if (!this.plannerConfig.pools.some((p) => p.id === pool)) return;
    const decode = maxTokens !== null && maxTokens > 0 ? maxTokens : DEFAULT_DECODE_TOKENS;
    for (const c of this.countsOf(pool)) {
      c.arrivals++;
      c.promptTokens += Math.max(0, promptTokens);
      c.decodeTokens += decode;
    }
  }

  /**
   * A finished request of `model`: its TTFT and mean ITL (ms; null = not measured), for SLA mode's
   * correction. A P/D request's TTFT is its prefill pool's doing, its ITL its decode pool's; an
   * aggregated pool gets both.
   */
  recordLatency(model: string, ttftMs: number | null, itlMs: number | null): void {
    for (const { pool, role } of poolsOfModel(this.poolIds, model)) {
      for (const c of this.countsOf(pool)) {
        if (role !== "decode" && ttftMs !== null && Number.isFinite(ttftMs) && ttftMs >= 0) {
          c.ttftCount++;
          c.ttftMsSum += ttftMs;
        }
        if (role !== "prefill" && itlMs !== null && Number.isFinite(itlMs) && itlMs > 0) {
          c.itlCount++;
          c.itlMsSum += itlMs;
        }
      }
    }
  }

  /** The window's counts and the totals of `pool` (created on first use). */
  private countsOf(pool: string): [Counts, Counts] {
    const c = this.counts.get(pool) ?? zeroCounts();
    this.counts.set(pool, c);
    const t = this.totals.get(pool) ?? zeroCounts();
    this.totals.set(pool, t);
    return [c, t];
  }

  /** Arrivals and tokens per pool since this planner started (monotonic; the node summary's counts). */
  poolTotals(): Record<string, PoolTotals> {
    return Object.fromEntries([...this.totals].map(([k, v]) => [k, { ...v }]));
  }

  /** Run a tick now (coalesced, outside the caller's stack): a request is waiting for an engine. */
  poke(): void {
    if (!this.running || this.pokeTimer) return;
    this.pokeTimer = this.o.clock.setTimer(0, () => {
      this.pokeTimer = null;
      if (this.running) this.tick("poke");
    });
  }

  /** One decision: signals + fleet → decide() → actions (taken, or logged in dry-run). */
  tick(trigger: "timer" | "poke" = "timer"): Decision {
    const now = this.o.clock.now();
    // Rates over at least one tick: a poke right after a tick must not turn one request into a flood.
    const dtS = Math.max(now - this.lastTickMs, this.o.config.planner.tick_ms, 1) / 1000;
    let signals = new Map<string, PoolSignals>();
    for (const pool of this.plannerConfig.pools) {
      const c = this.counts.get(pool.id) ?? zeroCounts();
      const held = this.hold.summary(pool.id);
      signals.set(pool.id, {
        arrivalsPerS: c.arrivals / dtS, uncachedPrefillTokensPerS: c.promptTokens / dtS, decodeTokensPerS: c.decodeTokens / dtS,
        heldRequests: held.requests, heldTokens: held.promptTokens, ttftMsMean: latencyMean(c.ttftMsSum, c.ttftCount), itlMsMean: latencyMean(c.itlMsSum, c.itlCount), latencySamples: Math.max(c.ttftCount, c.itlCount),
        ...this.o.extraSignals?.(pool.id, dtS),
      });
    }
    if (now - this.lastTickMs >= this.o.config.planner.tick_ms || trigger === "timer") {
      this.counts = new Map();
      this.lastTickMs = now;
    }
    let fleet: Fleet;
    let actuator = this.o.actuator;
    const cluster = this.o.cluster;
    if (cluster) {
      const term = cluster.leading();
      if (term === null) return this.follow(now);
      if (term !== this.leaderTerm) {
        // A new leadership: recompute from the cluster's fleet, no scale-down before a down window.
        this.leaderTerm = term;
        this.memory = initialMemory(now);
      }
      const seen = cluster.observe(now, term);
      if (typeof seen === "string") {
        // Nodes keep what they run until this leader has observed a full window of every node.
        this.waitingWhy = seen;
        this.releaseReady();
        return { actions: [], pools: [], memory: this.memory };
      }
      this.waitingWhy = null;
      signals = seen.signals;
      fleet = seen.fleet;
      actuator = cluster.actuator(term);
    } else fleet = actuator.fleet();
    const d = (this.o.decide ?? decide)(now, this.timeOfDayS(), signals, fleet, this.plannerConfig, this.memory);
    this.memory = d.memory;
    this.last = d;
    this.lastTickAtMs = now;
    this.ticks++;
    this.o.metrics?.tick(trigger);
    for (const p of d.pools) this.o.metrics?.decision(p, this.hold.summary(p.pool).requests);
    for (const a of d.actions) this.actuate(a, d.pools.find((p) => p.pool === a.pool)?.reason ?? "hold", actuator);
    this.releaseReady();
    return d;
  }

  /**
   * A follower does not plan: the leader decides from its summary. One local duty stays, so a node
   * cut off from the leader still serves: a request held here for longer than a tick wakes this
   * node's own sleeping engine of its pool (a wake starts nothing and stops nothing). Only when cut
   * off: with a leader in touch, the leader decides, or both would add an engine (a double start).
   */
  private follow(now: number): Decision {
    this.leaderTerm = null;
    const fleet = this.o.actuator.fleet();
    if (this.hold.size.count > 0) this.o.cluster?.nudge?.();
    const cutOff = this.o.cluster?.cutOff() ?? false;
    for (const pool of cutOff ? this.hold.heldPools() : []) {
      const h = this.hold.summary(pool);
      if (h.oldestWaitMs === null || h.oldestWaitMs < this.o.config.planner.tick_ms) continue;
      const engines = fleet.engines.filter((e) => e.pool === pool);
      if (engines.some((e) => e.state === "ready" || e.state === "waking")) continue;
      const sleeper = engines.find((e) => e.state === "sleeping");
      if (sleeper) this.actuate({ kind: "wake", pool, engine: sleeper.id }, "follower_hold", this.o.actuator);
    }
    this.releaseReady();
    this.lastTickAtMs = now;
    return { actions: [], pools: [], memory: this.memory };
  }

  /** The last decision this planner took (null before its first, and on a follower). */
  get lastDecision(): Decision | null {
    return this.last;
  }

  /** This node's own engines and host (the node summary's fleet), whoever plans. */
  localFleet(): Fleet {
    return this.o.actuator.fleet();
  }

  /** Why the cluster's new leader does not act yet (null: it does, or no cluster). */
  get waitingFor(): string | null {
    return this.waitingWhy;
  }

  status(): PlannerStatus {
    return plannerStatus({
      config: this.o.config, now: this.o.clock.now(), last: this.last, lastTickAtMs: this.lastTickAtMs, ticks: this.ticks,
      fleet: this.o.actuator.fleet(), hold: this.hold, recent: this.recent, predictReadyMs: (p) => this.o.actuator.predictReadyMs(p),
    });
  }

  private actuate(a: Action, reason: string, actuator: Actuator = this.o.actuator): void {
    const line = describeAction(a);
    if (this.o.config.planner.dry_run) {
      this.log.info(`planner (dry run) would ${line}`, { reason });
      this.o.metrics?.action(a, "dry_run");
      this.remember(a, reason, "dry_run");
      return;
    }
    this.log.info(`planner: ${line}`, { reason });
    const p = actuator
      .act(a)
      .then((r) => {
        const outcome = !r.ok ? "failed" : r.skipped ? "skipped" : "ok";
        this.o.metrics?.action(a, outcome);
        this.remember(a, reason, outcome, r.ok ? (r.skipped ?? null) : r.error, r.engine);
        if (!r.ok) this.log.warn(`planner: ${line} failed`, { error: r.error });
        // A finished wake or start may be what a held request waits for.
        this.releaseReady();
      })
      .catch((e: unknown) => this.log.error(`planner: ${line} threw`, { error: errorMessage(e) }));
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  private remember(a: Action, reason: string, outcome: string, detail: string | null = null, engine: string | null = null): void {
    this.recent.push({ atMs: this.o.clock.now(), action: describeAction(a), kind: a.kind, pool: a.pool, engine: engine ?? (a.kind === "start" ? null : a.engine), reason, outcome, detail });
    if (this.recent.length > RECENT_ACTIONS_MAX) this.recent.shift();
  }

  /** Release held requests of every pool that has a ready engine now (the daemon calls it when its registry changes). */
  releaseReady(): void {
    const pools = this.hold.heldPools();
    if (pools.length === 0) return;
    if (this.o.hasReady) {
      for (const pool of pools) if (this.o.hasReady(pool)) this.hold.readyFor(pool);
      return;
    }
    const ready = new Set(this.o.actuator.fleet().engines.filter((e) => e.state === "ready").map((e) => e.pool));
    for (const pool of pools) if (ready.has(pool)) this.hold.readyFor(pool);
  }

  private schedule(): void {
    this.timer = this.o.clock.setTimer(this.o.config.planner.tick_ms, () => {
      if (!this.running) return;
      try {
        this.tick("timer");
      } catch (e) {
        this.log.error("planner tick failed", { error: errorMessage(e) });
      }
      this.schedule();
    });
  }

  private timeOfDayS(): number {
    if (this.o.timeOfDayS) return this.o.timeOfDayS();
    const d = new Date(wallClockMs());
    return d.getHours() * 3600 + d.getMinutes() * 60 + d.getSeconds();
  }
}
