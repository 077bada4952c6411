// A supervisor on the virtual clock for planner tests: engines become ready startMs after addEngine,
// wake wakeMs after wakeEngine; implements the part of the Supervisor the LocalActuator drives.
import type { Clock } from "../../src/core/clock.ts";
import type { Config } from "../../src/config/types.ts";
import type { EngineStatus, SleepState } from "../../src/engine/supervisor.ts";
import type { Phase } from "../../src/engine/machine.ts";
import type { ScalableSupervisor } from "../../src/planner/actuator-local.ts";
import type { Worker } from "../../src/workers/worker.ts";

interface FakeEngine {
  id: string;
  entry: number;
  phase: Phase;
  sleep: SleepState;
  cordoned: boolean;
}

export class FakeSupervisor implements ScalableSupervisor {
  readonly engines = new Map<string, FakeEngine>();
  readonly calls: string[] = [];
  private readonly listeners = new Set<(w: Worker) => void>();
  private n = 0;
  failNextAdd = false;

  constructor(
    private readonly config: Config,
    private readonly clock: Clock,
    readonly timings = { startMs: 5_000, wakeMs: 500 },
  ) {}

  status(): EngineStatus[] {
    return [...this.engines.values()].map((e) => ({
      worker: this.worker(e), phase: e.phase, reason: "", pid: 1, crashes: 0, lastExit: null, logFile: null, sleep: e.sleep, cordoned: e.cordoned,
      plan: { id: e.id, kind: "sim", model: this.config.engines[e.entry]!.model, role: this.config.engines[e.entry]!.role, entryIndex: e.entry, index: 0, url: "", healthPath: "/health", spec: null },
    }));
  }

  onChange(fn: (w: Worker) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  addEngine(entryIndex: number): string {
    this.calls.push(`add ${entryIndex}`);
    if (this.failNextAdd) {
      this.failNextAdd = false;
      throw new Error("no free port");
    }
    const e: FakeEngine = { id: `n1/sim-${this.n++}`, entry: entryIndex, phase: "starting", sleep: "awake", cordoned: false };
    this.engines.set(e.id, e);
    this.clock.setTimer(this.timings.startMs, () => {
      if (e.phase === "starting") this.set(e, { phase: "ready" });
    });
    return e.id;
  }

  drainEngine(id: string): void {
    this.calls.push(`drain ${id}`);
    this.set(this.engines.get(id)!, { cordoned: true });
  }

  async removeEngine(id: string): Promise<void> {
    this.calls.push(`remove ${id}`);
    this.set(this.engines.get(id)!, { phase: "stopped" });
  }

  async sleepEngine(id: string): Promise<void> {
    this.calls.push(`sleep ${id}`);
    this.set(this.engines.get(id)!, { sleep: "sleeping" });
  }

  async wakeEngine(id: string): Promise<void> {
    this.calls.push(`wake ${id}`);
    const e = this.engines.get(id)!;
    this.set(e, { sleep: "waking" });
    await this.clock.sleep(this.timings.wakeMs);
    this.set(e, { sleep: "awake" });
  }

  private set(e: FakeEngine, patch: Partial<FakeEngine>): void {
    Object.assign(e, patch);
    for (const fn of this.listeners) fn(this.worker(e));
  }

  private worker(e: FakeEngine): Worker {
    const c = this.config.engines[e.entry]!;
    const state = e.phase === "ready" ? (e.cordoned || e.sleep !== "awake" ? "draining" : "ready") : e.phase === "stopped" ? "stopped" : "starting";
    return { id: e.id, node: "n1", model: c.model, role: c.role, kind: "sim", url: "", state, load: { in_flight: 0, running: null, waiting: null, kv_usage: null, scraped_at_ms: null }, restarts: 0 };
  }
}
