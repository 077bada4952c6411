// One simulated host's supervisor on the virtual clock: the part of the Supervisor the planner's
// LocalActuator drives (ScalableSupervisor), with each engine the sim engine's own scheduler
// (src/engine/sim/scheduler.ts `SimScheduler`, fast-forwarded: the one timing model). A start becomes ready after a long-tailed cold start, a wake after wakeMs;
// a stop or sleep of an engine with requests in flight is an invariant violation (reported, and the
// simulation throws at the end of its tick); fail() is the host dying: every engine gone at once.
import type { Clock } from "../../core/clock.ts";
import type { Config } from "../../config/types.ts";
import type { EngineStatus, SleepState } from "../../engine/supervisor.ts";
import type { Phase } from "../../engine/machine.ts";
import type { Worker } from "../../workers/worker.ts";
import { emptyLoad } from "../../workers/worker.ts";
import type { ScalableSupervisor } from "../../planner/actuator-local.ts";
import { type SchedulerConfig, SimScheduler } from "../../engine/sim/scheduler.ts";

export interface VirtualEngine {
  id: string;
  entry: number;
  phase: Phase;
  sleep: SleepState;
  cordoned: boolean;
  sched: SimScheduler | null;
  inFlight: number;
  /** Term of the leader whose assignment started it (the failover's double-start check). */
  term: number;
}

export interface VirtualSupervisorOptions {
  node: string;
  config: Config;
  clock: Clock;
  gpusPerEngine: number;
  engine: SchedulerConfig;
  /** Milliseconds of the next cold start (drawn by the simulation's seeded stream). */
  startDelayMs: () => number;
  wakeMs: number;
  onViolation: (message: string) => void;
}

export class VirtualSupervisor implements ScalableSupervisor {
  readonly engines = new Map<string, VirtualEngine>();
  private readonly listeners = new Set<(w: Worker) => void>();
  private n = 0;
  /** Term stamped on the next engine added (the simulation sets it from the assignment being applied). */
  currentTerm = 0;

  constructor(private readonly o: VirtualSupervisorOptions) {}

  status(): EngineStatus[] {
    const out: EngineStatus[] = [];
    for (const e of this.engines.values()) {
      const gpus = Array.from({ length: this.o.gpusPerEngine }, (_, i) => i);
      const c = this.o.config.engines[e.entry]!;
      out.push({
        worker: this.worker(e), phase: e.phase, reason: "", pid: null, crashes: 0, lastExit: null, logFile: null, sleep: e.sleep, cordoned: e.cordoned,
        plan: {
          id: e.id, kind: "sim", model: c.model, role: c.role, entryIndex: e.entry, index: 0, url: `sim://${e.id}`, healthPath: "/health",
          spec: { id: e.id, argv: [], env: {}, host: "sim", port: 0, url: `sim://${e.id}`, healthPath: "/health", servedModelName: c.model, gpus },
        },
      });
    }
    return out;
  }

  onChange(fn: (w: Worker) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  addEngine(entryIndex: number): string {
    const e: VirtualEngine = { id: `${this.o.node}/sim-${this.n++}`, entry: entryIndex, phase: "starting", sleep: "awake", cordoned: false, sched: null, inFlight: 0, term: this.currentTerm };
    this.engines.set(e.id, e);
    this.o.clock.setTimer(this.o.startDelayMs(), () => {
      if (e.phase !== "starting") return;
      e.sched = new SimScheduler(this.o.engine, this.o.clock);
      this.set(e, { phase: "ready" });
    });
    this.emit(e);
    return e.id;
  }

  /** An engine ready at once (the run's initial fleet). */
  addReady(entryIndex: number): string {
    const id = this.addEngine(entryIndex);
    const e = this.engines.get(id)!;
    e.sched = new SimScheduler(this.o.engine, this.o.clock);
    this.set(e, { phase: "ready" });
    return id;
  }

  drainEngine(id: string): void {
    const e = this.engines.get(id);
    if (e) this.set(e, { cordoned: true });
  }

  async removeEngine(id: string): Promise<void> {
    const e = this.engines.get(id);
    if (!e) return;
    if (e.inFlight > 0) this.o.onViolation(`engine ${id} stopped with ${e.inFlight} in flight at ${this.o.clock.now()} ms`);
    this.set(e, { phase: "stopped" });
    this.engines.delete(id);
  }

  async sleepEngine(id: string): Promise<void> {
    const e = this.engines.get(id);
    if (!e) return;
    if (e.inFlight > 0) this.o.onViolation(`engine ${id} put to sleep with ${e.inFlight} in flight at ${this.o.clock.now()} ms`);
    this.set(e, { sleep: "sleeping" });
  }

  async wakeEngine(id: string): Promise<void> {
    const e = this.engines.get(id);
    if (!e) return;
    this.set(e, { sleep: "waking" });
    await this.o.clock.sleep(this.o.wakeMs);
    if (e.sleep === "waking" && this.engines.has(id)) this.set(e, { sleep: "awake" });
  }

  /** The host dies: every engine is gone; returns the requests that were in flight on them. */
  fail(): number {
    let lost = 0;
    for (const e of [...this.engines.values()]) {
      lost += e.inFlight;
      e.inFlight = 0;
        // Its requests end as aborted (their handlers see the engine gone and count nothing).
      const sched = e.sched;
      e.sched = null;
      sched?.abortAll();
      this.set(e, { phase: "stopped" });
      this.engines.delete(e.id);
    }
    return lost;
  }

  /** GPUs held by engines (any state but stopped). */
  gpusUsed(): number {
    return this.engines.size * this.o.gpusPerEngine;
  }

  private set(e: VirtualEngine, patch: Partial<VirtualEngine>): void {
    Object.assign(e, patch);
    this.emit(e);
  }

  private emit(e: VirtualEngine): void {
    const w = this.worker(e);
    for (const fn of this.listeners) fn(w);
  }

  private worker(e: VirtualEngine): Worker {
    const c = this.o.config.engines[e.entry]!;
    const state = e.phase === "ready" ? (e.cordoned || e.sleep !== "awake" ? "draining" : "ready") : e.phase === "stopped" ? "stopped" : "starting";
    return { id: e.id, node: this.o.node, model: c.model, role: c.role, kind: "sim", url: `sim://${e.id}`, state, load: emptyLoad(), restarts: 0 };
  }
}
