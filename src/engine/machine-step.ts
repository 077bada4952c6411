// One transition of the supervisor's per-engine state machine (machine.ts): the state copy and the
// effects it emits, one method per event. Pure: time comes in as `nowMs`.
import type { AfterKill, Effect, MachineEvent, MachinePolicy, MachineState, TimerName } from "./machine.ts";

/** How often a draining worker's in-flight count is re-read. */
export const DRAIN_POLL_MS = 50;
/**
 * After the drain deadline's migration, how long the engine keeps running for the moved requests
 * to leave it (their aborted reads end within milliseconds; a forwarded leg of another node ends
 * when the engine stops, and that node migrates it then).
 */
export const DRAIN_MIGRATE_SETTLE_MS = 2000;

/** Delay before restart number `crashes` (1-based): initial · 2^(n-1), capped at the maximum. */
export function backoffMs(p: Pick<MachinePolicy, "restart_backoff_initial_ms" | "restart_backoff_max_ms">, crashes: number): number {
  const n = Math.max(1, crashes);
  // Cap the exponent so huge crash counts cannot overflow to Infinity before the min().
  const raw = p.restart_backoff_initial_ms * 2 ** Math.min(n - 1, 40);
  return Math.min(raw, p.restart_backoff_max_ms);
}

const ALL_TIMERS: TimerName[] = ["startup", "probe", "backoff", "kill", "drain"];

/** One transition: a copy of the state and the effects so far, with one method per event. */
export class Step {
  readonly s: MachineState;
  readonly fx: Effect[] = [];
  /** Whether a process is (or should be) up, as the phase was before this event. */
  private readonly live: boolean;

  constructor(prev: MachineState, private readonly p: MachinePolicy, private readonly nowMs: number) {
    this.s = { ...prev };
    this.live = prev.phase === "starting" || prev.phase === "ready" || prev.phase === "unhealthy";
  }

  apply(ev: MachineEvent): void {
    switch (ev.type) {
      case "start":
        if (this.s.phase === "idle") this.spawn("starting");
        break;
      case "spawnFailed":
        if (this.s.phase === "starting") {
          this.s.lastError = ev.error;
          this.crash(`spawn failed: ${ev.error}`);
        }
        break;
      case "exited":
        // Only a crash carries a cause: a stop's exit is expected.
        if (ev.lastError && (this.live || (this.s.phase === "killing" && this.s.afterKill === "crash"))) this.s.lastError = ev.lastError;
        return this.exited(ev.signal ? `signal ${ev.signal}` : `code ${ev.code}`);
      case "probed":
        return this.probed(ev);
      case "timer":
        return this.timer(ev.name);
      case "drainCheck":
        return this.drainCheck(ev.inFlight);
      case "restart":
        return this.restart();
      case "stop":
        return this.stop(ev.drainMs);
    }
  }

  private exited(how: string): void {
    const s = this.s;
    if (this.live) this.crash(`exited with ${how} while ${s.phase}`);
    else if (s.phase === "killing") {
      this.cancel("kill");
      if (s.afterKill === "crash") this.crash(`${s.reason} (exited with ${how})`);
      else if (s.afterKill === "respawn") {
        s.restarts++;
        this.spawn("restarting on request");
      } else this.stopped(`stopped (exited with ${how})`);
    } else if (s.phase === "draining") this.stopped(`exited with ${how} while draining`);
  }

  private probed(ev: Extract<MachineEvent, { type: "probed" }>): void {
    const s = this.s;
    if (ev.gen !== s.gen || !this.live) return;
    s.probing = false;
    this.fx.push({ t: "timer", name: "probe", ms: this.p.health_interval_ms });
    if (ev.ok) {
      if (s.phase === "starting" || s.phase === "unhealthy") {
        if (s.phase === "starting") {
          this.cancel("startup");
          s.readySinceMs = this.nowMs;
        }
        this.log("info", s.phase === "starting" ? "engine ready" : "engine healthy again");
        s.phase = "ready";
        s.reason = "healthy";
        s.lastError = null;
      }
      s.failedProbes = 0;
    } else if (s.phase === "ready") {
      s.failedProbes++;
      if (s.failedProbes >= this.p.unhealthy_threshold) {
        s.phase = "unhealthy";
        s.reason = `${s.failedProbes} failed health probes${ev.detail ? ` (${ev.detail})` : ""}`;
        this.log("warn", "engine unhealthy, out of rotation", { reason: s.reason });
      }
    }
  }

  private timer(name: TimerName): void {
    const { s, p } = this;
    switch (name) {
      case "probe":
        if (this.live && !s.probing) {
          s.probing = true;
          this.fx.push({ t: "probe", gen: s.gen });
        }
        break;
      case "startup":
        if (s.phase === "starting" && p.managed) {
          this.log("warn", "engine not healthy in time, killing it", { startup_timeout_ms: p.startup_timeout_ms });
          this.kill("crash", `not healthy within ${p.startup_timeout_ms} ms`);
        }
        break;
      case "backoff":
        if (s.phase === "backoff") {
          s.restarts++;
          this.spawn(`restart ${s.restarts} after: ${s.reason}`);
        }
        break;
      case "kill":
        if (s.phase === "killing") {
          this.log("warn", "engine ignored SIGTERM, sending SIGKILL", { stop_timeout_ms: p.stop_timeout_ms });
          this.fx.push({ t: "signal", sig: "SIGKILL" });
        }
        break;
      case "drain":
        // The runner answers this timer with a drainCheck carrying the current in-flight count.
        break;
    }
  }

  private drainCheck(inFlight: number): void {
    const { s, nowMs } = this;
    if (s.phase !== "draining") return;
    if (inFlight <= 0 || nowMs >= (s.drainDeadlineMs ?? nowMs)) {
      if (inFlight > 0 && this.p.migrateAtDrainDeadline && !s.drainMigrated) {
        // Streams still running at the deadline continue elsewhere instead of being cut (issue 21).
        s.drainMigrated = true;
        s.drainDeadlineMs = nowMs + DRAIN_MIGRATE_SETTLE_MS;
        this.log("info", "drain deadline reached: migrating the requests in flight", { in_flight: inFlight });
        this.fx.push({ t: "migrate" });
        this.fx.push({ t: "timer", name: "drain", ms: DRAIN_POLL_MS });
        return;
      }
      if (inFlight > 0) this.log("warn", "drain timeout, stopping with requests in flight", { in_flight: inFlight });
      if (this.p.managed) this.kill("stop", "stopping");
      else this.stopped("stopped");
    } else {
      this.fx.push({ t: "timer", name: "drain", ms: Math.min(DRAIN_POLL_MS, (s.drainDeadlineMs ?? nowMs) - nowMs) });
    }
  }

  private restart(): void {
    const s = this.s;
    if (this.live) {
      s.crashes = 0;
      if (this.p.managed) this.kill("respawn", "restarting on request");
      else {
        this.cancel("probe");
        this.spawn("re-checking on request");
      }
    } else if (s.phase === "backoff" || s.phase === "failed" || s.phase === "stopped") {
      this.cancel("backoff");
      s.crashes = 0;
      s.restarts++;
      this.spawn("restarting on request");
    } else if (s.phase === "idle") this.spawn("starting");
    else if (s.phase === "killing" && s.afterKill === "crash") {
      s.crashes = 0;
      s.afterKill = "respawn";
    }
  }

  private stop(drainMs: number): void {
    const s = this.s;
    if (this.live) {
      this.cancel("probe", "startup");
      s.probing = false;
      s.phase = "draining";
      s.reason = "draining";
      s.drainDeadlineMs = this.nowMs + Math.max(0, drainMs);
      s.drainMigrated = drainMs <= 0; // a stop without a drain (herd's own exit) moves nothing
      this.fx.push({ t: "timer", name: "drain", ms: 0 });
    } else if (s.phase === "killing") s.afterKill = "stop";
    else if (s.phase !== "draining") this.stopped("stopped");
  }

  private spawn(reason: string): void {
    const { s, p, fx } = this;
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
  }

  private kill(after: AfterKill, reason: string): void {
    const s = this.s;
    s.phase = "killing";
    s.afterKill = after;
    s.reason = reason;
    s.probing = false;
    this.cancel("probe", "startup", "drain");
    this.fx.push({ t: "signal", sig: "SIGTERM" });
    this.fx.push({ t: "timer", name: "kill", ms: this.p.stop_timeout_ms });
  }

  private crash(reason: string): void {
    const { s, p } = this;
    this.cancel("probe", "startup", "kill");
    s.probing = false;
    if (s.readySinceMs !== null && this.nowMs - s.readySinceMs >= p.restart_reset_ms) s.crashes = 0;
    s.readySinceMs = null;
    s.crashes++;
    if (s.crashes > p.max_restarts) {
      s.phase = "failed";
      s.reason = `${reason}; gave up after ${p.max_restarts} restarts`;
      this.log("error", "engine failed", { reason: s.reason, ...(s.lastError ? { last_error: s.lastError } : {}) });
      return;
    }
    const delay = backoffMs(p, s.crashes);
    s.phase = "backoff";
    s.reason = reason;
    this.fx.push({ t: "timer", name: "backoff", ms: delay });
    this.log("warn", "engine down, restarting after backoff", { reason, ...(s.lastError ? { last_error: s.lastError } : {}), backoff_ms: delay, crashes: s.crashes });
  }

  private stopped(reason: string): void {
    this.cancel(...ALL_TIMERS);
    this.s.phase = "stopped";
    this.s.reason = reason;
    this.s.probing = false;
  }

  private cancel(...names: TimerName[]): void {
    for (const name of names) this.fx.push({ t: "cancel", name });
  }

  private log(level: "info" | "warn" | "error", msg: string, fields?: Record<string, unknown>): void {
    this.fx.push(fields ? { t: "log", level, msg, fields } : { t: "log", level, msg });
  }
}
