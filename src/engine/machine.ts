// The supervisor's functional core: one worker's lifecycle as a pure transition function.
// (state, event, policy, now) → (state', effects). No processes, sockets or timers here: the runner
// (runner.ts) turns effects into spawns, signals, probes and Clock timers, and feeds results back
// as events. Everything time-dependent (backoff, crash-count reset, drain deadline) is decided
// from `nowMs`, so the whole lifecycle replays exactly on a VirtualClock.
import type { SupervisorConfig } from "../config/types.ts";
import type { WorkerState } from "../workers/worker.ts";
import { Step } from "./machine-step.ts";

export { backoffMs, DRAIN_MIGRATE_SETTLE_MS, DRAIN_POLL_MS } from "./machine-step.ts";

export type MachinePolicy = Pick<
  SupervisorConfig,
  | "health_interval_ms"
  | "startup_timeout_ms"
  | "unhealthy_threshold"
  | "restart_backoff_initial_ms"
  | "restart_backoff_max_ms"
  | "max_restarts"
  | "restart_reset_ms"
  | "stop_timeout_ms"
> & {
  /** false for `external`: health probing only, never a process. */
  managed: boolean;
  /**
   * At the drain deadline, requests still in flight are first moved to other workers (the `migrate`
   * effect: herd's request migration) and the engine stops once they are gone, at most
   * DRAIN_MIGRATE_SETTLE_MS later; without it they are cut by the stop.
   */
  migrateAtDrainDeadline?: boolean;
};

/**
 * idle → starting → ready ⇄ unhealthy; a process exit → backoff → starting … → failed;
 * stop: draining → killing(stop) → stopped. `killing` also serves startup timeouts (then a crash)
 * and manual restarts (then an immediate respawn).
 */
export type Phase = "idle" | "starting" | "ready" | "unhealthy" | "backoff" | "killing" | "failed" | "draining" | "stopped";
export type AfterKill = "crash" | "respawn" | "stop";
export type TimerName = "startup" | "probe" | "backoff" | "kill" | "drain";

export interface MachineState {
  phase: Phase;
  /** What happens when the process being killed exits (meaningful in `killing`). */
  afterKill: AfterKill;
  /** Incarnation number: bumps on every spawn, so results from an old process are ignored. */
  gen: number;
  /** Consecutive crashes without staying ready for restart_reset_ms. */
  crashes: number;
  /** Restarts since herd started this worker. */
  restarts: number;
  failedProbes: number;
  probing: boolean;
  readySinceMs: number | null;
  drainDeadlineMs: number | null;
  /** The drain deadline passed once and in-flight requests were sent elsewhere (`migrate`). */
  drainMigrated: boolean;
  /** Why the worker is in its phase, for status and logs. */
  reason: string;
  /**
   * The cause of the last crash as the engine's own output or the supervisor names it (the last
   * error line, a port lost between planning and bind, a spawn error); null once it is ready again.
   */
  lastError: string | null;
}

export type MachineEvent =
  | { type: "start" }
  | { type: "exited"; code: number | null; signal: string | null; lastError?: string | null }
  | { type: "spawnFailed"; error: string }
  | { type: "probed"; gen: number; ok: boolean; detail?: string }
  | { type: "timer"; name: TimerName }
  | { type: "drainCheck"; inFlight: number }
  | { type: "restart" }
  | { type: "stop"; drainMs: number };

export type Effect =
  | { t: "spawn" }
  | { t: "signal"; sig: "SIGTERM" | "SIGKILL" }
  | { t: "probe"; gen: number }
  | { t: "timer"; name: TimerName; ms: number }
  | { t: "cancel"; name: TimerName }
  /** Move the requests still in flight on this worker to other workers (the drain deadline passed). */
  | { t: "migrate" }
  | { t: "log"; level: "info" | "warn" | "error"; msg: string; fields?: Record<string, unknown> };

export function initialState(): MachineState {
  return {
    phase: "idle",
    afterKill: "crash",
    gen: 0,
    crashes: 0,
    restarts: 0,
    failedProbes: 0,
    probing: false,
    readySinceMs: null,
    drainDeadlineMs: null,
    drainMigrated: false,
    reason: "not started",
    lastError: null,
  };
}

/** The routing-facing state: only `ready` takes traffic; every recovering phase reads `starting`. */
export function workerState(s: MachineState): WorkerState {
  switch (s.phase) {
    case "ready":
      return "ready";
    case "draining":
      return "draining";
    case "killing":
      return s.afterKill === "stop" ? "draining" : "starting";
    case "failed":
      return "failed";
    case "stopped":
      return "stopped";
    default:
      return "starting";
  }
}

export function transition(
  prev: MachineState,
  ev: MachineEvent,
  p: MachinePolicy,
  nowMs: number,
): { state: MachineState; effects: Effect[] } {
  const step = new Step(prev, p, nowMs);
  step.apply(ev);
  return { state: step.s, effects: step.fx };
}
