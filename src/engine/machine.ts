// The supervisor's functional core: one worker's lifecycle as a pure transition function.
// (state, event, policy, now) → (state', effects). No processes, sockets or timers here: the runner
// (runner.ts) turns effects into spawns, signals, probes and Clock timers, and feeds results back
// as events. Everything time-dependent (backoff, crash-count reset, drain deadline) is decided
// from `nowMs`, so the whole lifecycle replays exactly on a VirtualClock.
import type { SupervisorConfig } from "../config/types.ts";
import type { WorkerState } from "../workers/worker.ts";

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
  /** Why the worker is in its phase, for status and logs. */
  reason: string;
}

export type MachineEvent =
  | { type: "start" }
  | { type: "exited"; code: number | null; signal: string | null }
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
  | { t: "log"; level: "info" | "warn" | "error"; msg: string; fields?: Record<string, unknown> };

/** How often a draining worker's in-flight count is re-read. */
export const DRAIN_POLL_MS = 50;

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
    reason: "not started",
  };
}

/** Delay before restart number `crashes` (1-based): initial · 2^(n-1), capped at the maximum. */
export function backoffMs(p: Pick<MachinePolicy, "restart_backoff_initial_ms" | "restart_backoff_max_ms">, crashes: number): number {
  const n = Math.max(1, crashes);
  // Cap the exponent so huge crash counts cannot overflow to Infinity before the min().
  const raw = p.restart_backoff_initial_ms * 2 ** Math.min(n - 1, 40);
  return Math.min(raw, p.restart_backoff_max_ms);
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

const ALL_TIMERS: TimerName[] = ["startup", "probe", "backoff", "kill", "drain"];

export function transition(
  prev: MachineState,
  ev: MachineEvent,
  p: MachinePolicy,
  nowMs: number,
): { state: MachineState; effects: Effect[] } {
  const s: MachineState = { ...prev };
  const fx: Effect[] = [];
  const cancel = (...names: TimerName[]) => names.forEach((name) => fx.push({ t: "cancel", name }));
  const log = (level: "info" | "warn" | "error", msg: string, fields?: Record<string, unknown>) =>
    fx.push(fields ? { t: "log", level, msg, fields } : { t: "log", level, msg });

  const spawn = (reason: string) => {
    s.gen++;
    s.phase = "starting";
    s.reason = reason;
    s.failedProbes = 0;
    s.probing = false;
    s.readySinceMs = null;
    if (p.managed) {
      fx.push({ t: "spawn" });
      fx.push({ t: "timer", name: "startup", ms: p.startup_timeout_ms });
      fx.push({ t: "timer", name: "probe", ms: p.health_interval_ms });
    } else {
      fx.push({ t: "timer", name: "probe", ms: 0 });
    }
  };
  const kill = (after: AfterKill, reason: string) => {
    s.phase = "killing";
    s.afterKill = after;
    s.reason = reason;
    s.probing = false;
    cancel("probe", "startup", "drain");
    fx.push({ t: "signal", sig: "SIGTERM" });
    fx.push({ t: "timer", name: "kill", ms: p.stop_timeout_ms });
  };
  const crash = (reason: string) => {
    cancel("probe", "startup", "kill");
    s.probing = false;
    if (s.readySinceMs !== null && nowMs - s.readySinceMs >= p.restart_reset_ms) s.crashes = 0;
    s.readySinceMs = null;
    s.crashes++;
    if (s.crashes > p.max_restarts) {
      s.phase = "failed";
      s.reason = `${reason}; gave up after ${p.max_restarts} restarts`;
      log("error", "engine failed", { reason: s.reason });
      return;
    }
    const delay = backoffMs(p, s.crashes);
    s.phase = "backoff";
    s.reason = reason;
    fx.push({ t: "timer", name: "backoff", ms: delay });
    log("warn", "engine down, restarting after backoff", { reason, backoff_ms: delay, crashes: s.crashes });
  };
  const stopped = (reason: string) => {
    cancel(...ALL_TIMERS);
    s.phase = "stopped";
    s.reason = reason;
    s.probing = false;
  };
  const live = s.phase === "starting" || s.phase === "ready" || s.phase === "unhealthy";

  switch (ev.type) {
    case "start":
      if (s.phase === "idle") spawn("starting");
      break;

    case "spawnFailed":
      if (s.phase === "starting") crash(`spawn failed: ${ev.error}`);
      break;

    case "exited": {
      const how = ev.signal ? `signal ${ev.signal}` : `code ${ev.code}`;
      if (live) crash(`exited with ${how} while ${s.phase}`);
      else if (s.phase === "killing") {
        cancel("kill");
        if (s.afterKill === "crash") crash(`${s.reason} (exited with ${how})`);
        else if (s.afterKill === "respawn") {
          s.restarts++;
          spawn("restarting on request");
        } else stopped(`stopped (exited with ${how})`);
      } else if (s.phase === "draining") stopped(`exited with ${how} while draining`);
      break;
    }

    case "probed":
      if (ev.gen !== s.gen || !live) break;
      s.probing = false;
      fx.push({ t: "timer", name: "probe", ms: p.health_interval_ms });
      if (ev.ok) {
        if (s.phase === "starting" || s.phase === "unhealthy") {
          if (s.phase === "starting") {
            cancel("startup");
            s.readySinceMs = nowMs;
          }
          log("info", s.phase === "starting" ? "engine ready" : "engine healthy again");
          s.phase = "ready";
          s.reason = "healthy";
        }
        s.failedProbes = 0;
      } else if (s.phase === "ready") {
        s.failedProbes++;
        if (s.failedProbes >= p.unhealthy_threshold) {
          s.phase = "unhealthy";
          s.reason = `${s.failedProbes} failed health probes${ev.detail ? ` (${ev.detail})` : ""}`;
          log("warn", "engine unhealthy, out of rotation", { reason: s.reason });
        }
      }
      break;

    case "timer":
      switch (ev.name) {
        case "probe":
          if (live && !s.probing) {
            s.probing = true;
            fx.push({ t: "probe", gen: s.gen });
          }
          break;
        case "startup":
          if (s.phase === "starting" && p.managed) {
            log("warn", "engine not healthy in time, killing it", { startup_timeout_ms: p.startup_timeout_ms });
            kill("crash", `not healthy within ${p.startup_timeout_ms} ms`);
          }
          break;
        case "backoff":
          if (s.phase === "backoff") {
            s.restarts++;
            spawn(`restart ${s.restarts} after: ${s.reason}`);
          }
          break;
        case "kill":
          if (s.phase === "killing") {
            log("warn", "engine ignored SIGTERM, sending SIGKILL", { stop_timeout_ms: p.stop_timeout_ms });
            fx.push({ t: "signal", sig: "SIGKILL" });
          }
          break;
        case "drain":
          // The runner answers this timer with a drainCheck carrying the current in-flight count.
          break;
      }
      break;

    case "drainCheck":
      if (s.phase !== "draining") break;
      if (ev.inFlight <= 0 || nowMs >= (s.drainDeadlineMs ?? nowMs)) {
        if (ev.inFlight > 0) log("warn", "drain timeout, stopping with requests in flight", { in_flight: ev.inFlight });
        if (p.managed) kill("stop", "stopping");
        else stopped("stopped");
      } else {
        fx.push({ t: "timer", name: "drain", ms: Math.min(DRAIN_POLL_MS, (s.drainDeadlineMs ?? nowMs) - nowMs) });
      }
      break;

    case "restart":
      if (live) {
        s.crashes = 0;
        if (p.managed) kill("respawn", "restarting on request");
        else {
          cancel("probe");
          spawn("re-checking on request");
        }
      } else if (s.phase === "backoff" || s.phase === "failed" || s.phase === "stopped") {
        cancel("backoff");
        s.crashes = 0;
        s.restarts++;
        spawn("restarting on request");
      } else if (s.phase === "idle") spawn("starting");
      else if (s.phase === "killing" && s.afterKill === "crash") {
        s.crashes = 0;
        s.afterKill = "respawn";
      }
      break;

    case "stop":
      if (live) {
        cancel("probe", "startup");
        s.probing = false;
        s.phase = "draining";
        s.reason = "draining";
        s.drainDeadlineMs = nowMs + Math.max(0, ev.drainMs);
        fx.push({ t: "timer", name: "drain", ms: 0 });
      } else if (s.phase === "killing") s.afterKill = "stop";
      else if (s.phase !== "draining") stopped("stopped");
      break;
  }
  return { state: s, effects: fx };
}
