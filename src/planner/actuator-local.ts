// The planner's actuator on one node: actions go to this node's Supervisor (src/engine/supervisor.ts
// scaling API). Idempotent: one action in flight per engine, a start per pool is counted until its
// engine shows up; a stop of an engine with requests in flight only drains it (the planner stops it
// once it is empty). Measures cold-start and wake times per pool (what Retry-After predicts from)
// and backs off the host after a failed start.
import type { Clock } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Config } from "../config/types.ts";
import type { EngineStatus } from "../engine/supervisor.ts";
import type { Worker } from "../workers/worker.ts";
import { actionEngine, type ActuationResult, type Actuator } from "./actuator.ts";
import type { Action, EngineState, Fleet, FleetEngine } from "./types.ts";

/** The part of the Supervisor the actuator drives (a fake implements it in tests). */
export interface ScalableSupervisor {
  status(): EngineStatus[];
  onChange(fn: (w: Worker) => void): () => void;
  addEngine(entryIndex: number): string;
  drainEngine(id: string): void;
  removeEngine(id: string, opts?: { drainMs?: number }): Promise<void>;
  sleepEngine(id: string): Promise<void>;
  wakeEngine(id: string): Promise<void>;
}

export interface LocalActuatorOptions {
  config: Config;
  supervisor: ScalableSupervisor;
  clock: Clock;
  log: Logger;
  /** Requests herd has in flight on a worker (the registry's lease count). */
  inFlight: (id: string) => number;
  /** The host's GPU count (0 = none: GPU-less kinds such as sim need none). */
  hostGpus: number;
  /** KV transfers a worker still owes (signals.ts TransferLedger); default none. */
  pendingTransfers?: (id: string) => number;
}

/** Pool id of an engines[] entry: `model/role` (planner types.ts). */
export const poolIdOf = (config: Config, entryIndex: number): string => `${config.engines[entryIndex]!.model}/${config.engines[entryIndex]!.role}`;

export class LocalActuator implements Actuator {
  private readonly busy = new Map<string, string>();
  private readonly seen = new Map<string, { state: EngineState; sinceMs: number; startedAtMs: number | null }>();
  private readonly measured = new Map<string, { startMs: number | null; wakeMs: number | null }>();
  private backoffUntilMs = 0;
  private failedStarts = 0;
  private readonly entryOfPool = new Map<string, number>();

  constructor(private readonly o: LocalActuatorOptions) {
    for (const p of o.config.planner.pools) this.entryOfPool.set(poolIdOf(o.config, p.engine), p.engine);
  }

  fleet(): Fleet {
    const now = this.o.clock.now();
    const engines: FleetEngine[] = [];
    let used = 0;
    for (const s of this.o.supervisor.status()) {
      const gpus = s.plan.spec?.gpus.length ?? 0;
      const state = fleetState(s);
      if (state !== "stopped") used += gpus;
      const pool = this.poolOf(s.plan.entryIndex);
      if (pool === null) continue;
      const id = s.worker.id;
      const prev = this.seen.get(id);
      if (!prev || prev.state !== state) this.observe(id, pool, prev, state, now);
      engines.push({ id, pool, host: this.o.config.node.name, state, inFlight: this.o.inFlight(id), pendingTransfers: this.o.pendingTransfers?.(id) ?? 0, gpus, sinceMs: this.seen.get(id)!.sinceMs });
    }
    // planner.gpu_budget caps what the planner spends (PlannerConfig.gpuBudget); the host has what it has.
    const total = this.o.hostGpus;
    const hosts = [{ name: this.o.config.node.name, gpusTotal: total, gpusFree: Math.max(0, total - used), backoffUntilMs: this.backoffUntilMs }];
    return { engines, hosts };
  }

  async act(a: Action): Promise<ActuationResult> {
    const engine = actionEngine(a);
    if (a.kind === "start") return this.start(a.pool);
    const status = this.o.supervisor.status().find((s) => s.worker.id === engine);
    if (!status) return { ok: true, engine, skipped: "unknown engine" };
    const under = this.busy.get(engine!);
    if (under) return { ok: true, engine, skipped: `${under} under way` };
    this.busy.set(engine!, a.kind);
    try {
      switch (a.kind) {
        case "drain":
          this.o.supervisor.drainEngine(engine!);
          break;
        case "stop":
          // Never stop a busy engine: drain it, and the next tick's stop finds it empty.
          if (this.o.inFlight(engine!) > 0) {
            this.o.supervisor.drainEngine(engine!);
            return { ok: true, engine, skipped: "requests in flight: drained instead" };
          }
          this.o.supervisor.drainEngine(engine!);
          await this.o.supervisor.removeEngine(engine!, { drainMs: this.o.config.frontend.drain_timeout_ms });
          break;
        case "sleep":
          await this.o.supervisor.sleepEngine(engine!);
          break;
        case "wake": {
          const t0 = this.o.clock.now();
          await this.o.supervisor.wakeEngine(engine!);
          this.record(a.pool, "wakeMs", this.o.clock.now() - t0);
          break;
        }
      }
      return { ok: true, engine };
    } catch (e) {
      return { ok: false, engine, error: errorMessage(e) };
    } finally {
      this.busy.delete(engine!);
    }
  }

  watch(fn: () => void): () => void {
    return this.o.supervisor.onChange(() => fn());
  }

  predictReadyMs(pool: string): number | null {
    const now = this.o.clock.now();
    const m = this.measured.get(pool) ?? { startMs: null, wakeMs: null };
    let best: number | null = null;
    const better = (ms: number | null) => {
      if (ms !== null && (best === null || ms < best)) best = Math.max(0, ms);
    };
    for (const [, s] of this.seenOfPool(pool)) {
      if (s.state === "ready") return 0;
      if (s.state === "starting" && m.startMs !== null) better(m.startMs - (now - s.sinceMs));
      if (s.state === "waking" && m.wakeMs !== null) better(m.wakeMs - (now - s.sinceMs));
      if (s.state === "sleeping") better(m.wakeMs);
    }
    better(m.startMs);
    return best;
  }

  /** Measured figures per pool (for /admin/planner). */
  measurements(pool: string): { start_ms: number | null; wake_ms: number | null } {
    const m = this.measured.get(pool);
    return { start_ms: m?.startMs ?? null, wake_ms: m?.wakeMs ?? null };
  }

  private start(pool: string): ActuationResult {
    const entry = this.entryOfPool.get(pool);
    if (entry === undefined) return { ok: false, engine: null, error: `no planner pool ${pool} on this node` };
    try {
      const id = this.o.supervisor.addEngine(entry);
      const now = this.o.clock.now();
      this.seen.set(id, { state: "starting", sinceMs: now, startedAtMs: now });
      return { ok: true, engine: id };
    } catch (e) {
      this.failedStart();
      return { ok: false, engine: null, error: errorMessage(e) };
    }
  }

  private observe(id: string, pool: string, prev: { state: EngineState; startedAtMs: number | null } | undefined, state: EngineState, now: number): void {
    const startedAtMs = state === "starting" ? (prev?.state === "starting" ? prev.startedAtMs : now) : (prev?.startedAtMs ?? null);
    if (prev?.state === "starting" && state === "ready" && startedAtMs !== null) {
      this.record(pool, "startMs", now - startedAtMs);
      this.failedStarts = 0;
    }
    if (prev?.state === "starting" && state === "stopped") this.failedStart();
    this.seen.set(id, { state, sinceMs: now, startedAtMs: state === "starting" ? startedAtMs : null });
  }

  private *seenOfPool(pool: string): Iterable<[string, { state: EngineState; sinceMs: number }]> {
    const entry = this.entryOfPool.get(pool);
    for (const s of this.o.supervisor.status()) if (s.plan.entryIndex === entry && this.seen.has(s.worker.id)) yield [s.worker.id, this.seen.get(s.worker.id)!];
  }

  /** Exponential moving average (new sample weighs 0.5: start times drift with cache warmth). */
  private record(pool: string, key: "startMs" | "wakeMs", ms: number): void {
    const m = this.measured.get(pool) ?? { startMs: null, wakeMs: null };
    m[key] = m[key] === null ? ms : Math.round((m[key]! + ms) / 2);
    this.measured.set(pool, m);
  }

  private failedStart(): void {
    this.failedStarts++;
    const sup = this.o.config.supervisor;
    const wait = Math.min(sup.restart_backoff_max_ms, sup.restart_backoff_initial_ms * 2 ** (this.failedStarts - 1));
    this.backoffUntilMs = this.o.clock.now() + wait;
    this.o.log.warn("planner: engine start failed; this host backs off", { backoff_ms: wait, failures: this.failedStarts });
  }

  private poolOf(entryIndex: number): string | null {
    for (const [pool, e] of this.entryOfPool) if (e === entryIndex) return pool;
    return null;
  }
}

/** The planner's view of a supervised engine. */
export function fleetState(s: EngineStatus): EngineState {
  const sleep = s.sleep ?? "awake";
  if (sleep === "sleeping" || sleep === "falling_asleep") return "sleeping";
  if (sleep === "waking") return "waking";
  switch (s.phase) {
    case "ready":
      return s.cordoned ? "draining" : "ready";
    case "draining":
      return "draining";
    case "killing":
      return s.cordoned ? "draining" : "starting";
    case "stopped":
    case "failed":
      return "stopped";
    default:
      return s.cordoned ? "draining" : "starting";
  }
}
