// Interprets the pure machine's effects: timers on the injected Clock, and spawn / signal / probe
// through ports the supervisor provides (real processes and HTTP) or a test provides (fakes on a
// VirtualClock). Events are queued so an effect that reports back synchronously (a failed spawn)
// never re-enters the transition function.
import type { Clock, TimerHandle } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import { initialState, transition } from "./machine.ts";
import type { Effect, MachineEvent, MachinePolicy, MachineState, TimerName } from "./machine.ts";

export interface ProbeResult {
  ok: boolean;
  detail?: string;
}

export interface RunnerPorts {
  /** Start the process; throw if it cannot be started. Its exit must be fed back as `exited`. */
  spawn(): void;
  signal(sig: "SIGTERM" | "SIGKILL"): void;
  probe(): Promise<ProbeResult>;
  /** Requests in flight on this worker (read while draining). */
  inFlight(): number;
  /** Move this worker's requests in flight to other workers (the drain deadline passed). */
  migrate?(): void;
  log(level: "info" | "warn" | "error", msg: string, fields?: Record<string, unknown>): void;
  /** Called after every event that was processed, with the states before and after. */
  changed(prev: MachineState, next: MachineState): void;
}

export class MachineRunner {
  private s: MachineState = initialState();
  private readonly timers = new Map<TimerName, TimerHandle>();
  private readonly queue: MachineEvent[] = [];
  private busy = false;

  constructor(
    private readonly policy: MachinePolicy,
    private readonly clock: Clock,
    private readonly ports: RunnerPorts,
  ) {}

  get state(): MachineState {
    return this.s;
  }

  dispatch(ev: MachineEvent): void {
    this.queue.push(ev);
    if (this.busy) return;
    this.busy = true;
    try {
      for (let e = this.queue.shift(); e; e = this.queue.shift()) {
        const prev = this.s;
        const { state, effects } = transition(prev, e, this.policy, this.clock.now());
        this.s = state;
        for (const fx of effects) this.apply(fx);
        this.ports.changed(prev, state);
      }
    } finally {
      this.busy = false;
    }
  }

  /** Cancel every pending timer (the supervisor calls this once the worker is stopped). */
  dispose(): void {
    for (const t of this.timers.values()) t.cancel();
    this.timers.clear();
  }

  private apply(fx: Effect): void {
    switch (fx.t) {
      case "spawn":
        try {
          this.ports.spawn();
        } catch (e) {
          this.queue.push({ type: "spawnFailed", error: errorMessage(e) });
        }
        return;
      case "signal":
        try {
          this.ports.signal(fx.sig);
        } catch (e) {
          this.ports.log("warn", "signal failed", { signal: fx.sig, error: errorMessage(e) });
        }
        return;
      case "probe": {
        const gen = fx.gen;
        this.ports.probe().then(
          (r) => this.dispatch(r.detail ? { type: "probed", gen, ok: r.ok, detail: r.detail } : { type: "probed", gen, ok: r.ok }),
          (e) => this.dispatch({ type: "probed", gen, ok: false, detail: errorMessage(e) }),
        );
        return;
      }
      case "timer": {
        this.timers.get(fx.name)?.cancel();
        const name = fx.name;
        const handle = this.clock.setTimer(fx.ms, () => {
          if (this.timers.get(name) !== handle) return;
          this.timers.delete(name);
          if (name === "drain") this.dispatch({ type: "drainCheck", inFlight: this.ports.inFlight() });
          else this.dispatch({ type: "timer", name });
        });
        this.timers.set(name, handle);
        return;
      }
      case "cancel":
        this.timers.get(fx.name)?.cancel();
        this.timers.delete(fx.name);
        return;
      case "migrate":
        try {
          this.ports.migrate?.();
        } catch (e) {
          this.ports.log("warn", "migrating requests at the drain deadline failed", { error: errorMessage(e) });
        }
        break;
      case "log":
        this.ports.log(fx.level, fx.msg, fx.fields);
        return;
    }
  }
}
