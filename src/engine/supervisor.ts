// The process supervisor (imperative shell): one MachineRunner per worker, wired to real processes
// (process.ts), HTTP health probes (health.ts), log capture and the engines.json record that
// lets the next herd clean up after a crash (orphans.ts). All lifecycle decisions are in machine.ts.
import type { Clock } from "../core/clock.ts";
import { errorMessage, HerdError } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { redactArgv } from "../config/redact.ts";
import type { Config } from "../config/types.ts";
import { emptyLoad } from "../workers/worker.ts";
import type { Worker } from "../workers/worker.ts";
import { httpProbe } from "./health.ts";
import type { Probe } from "./health.ts";
import { lastErrorLine, LogTail } from "./logtail.ts";
import { PortLeases } from "./port-leases.ts";
import { lostPorts, type PortCheck } from "./port-check.ts";
import { workerState } from "./machine.ts";
import type { MachineState, Phase } from "./machine.ts";
import { EngineRecordFile, ownerIsAnotherLiveHerd, reapLeftovers, recordFor } from "./orphans.ts";
import type { EngineRecord } from "./orphans.ts";
import { canListen, planEngines } from "./plan.ts";
import { planAddedEngine, planPorts, postEngine } from "./scale.ts";
import { detectGpus, type HostGpus } from "./gpus.ts";
import { selfCommand } from "./self.ts";
import type { PlanOptions } from "./plan.ts";
import { attachEngine, LogFile, logPath, spawnEngine } from "./process.ts";
import { heldPorts, liveRecords, sortLeftovers, specPorts } from "./recover.ts";
import { launchHash } from "./drivers/common.ts";
import { driverFor } from "./drivers/registry.ts";
import type { EngineProcess, ExitInfo } from "./process.ts";
import { MachineRunner } from "./runner.ts";
import type { EnginePlan } from "./types.ts";
import { join } from "node:path";

export interface SupervisorOptions {
  config: Config;
  clock: Clock;
  logger: Logger;
  /** Called with a fresh Worker snapshot whenever a worker's state or restart count changes. */
  onChange?: (worker: Worker) => void;
  /** Requests in flight on a worker, read while draining (the frontend's accounting). */
  inFlight?: (workerId: string) => number;
  /**
   * At a drain's deadline, move the worker's requests in flight to other workers (the frontend's
   * request migration) before the engine stops; absent = they are cut by the stop.
   */
  migrateAway?: (workerId: string) => void;
  /** Health probe; defaults to HTTP GET expecting 200. */
  probe?: Probe;
  plan?: PlanOptions;
  /**
   * Host-wide leases on planned ports (port-leases.ts), so herds on one host never plan the same
   * port. Default: the shared lease directory, unless `plan.isPortFree` is injected (a test that
   * fixes its own port space); null turns leases off.
   */
  leases?: PortLeases | null;
}

/** A worker as the supervisor sees it: the routing view plus process details for status/logs. */
export interface EngineStatus {
  worker: Worker;
  phase: Phase;
  reason: string;
  pid: number | null;
  crashes: number;
  lastExit: ExitInfo | null;
  plan: EnginePlan;
  logFile: string | null;
  /** Sleep mode (scaling API below): `awake` unless the planner put the engine to sleep. */
  sleep?: SleepState;
  /** Taken out of rotation by drainEngine() before a stop. */
  cordoned?: boolean;
  /** The cause of the last crash (last error line of its output, a lost port); null when ready or never crashed. */
  lastError?: string | null;
}

/** An engine's sleep mode: asleep (and falling asleep, waking) it takes no traffic but keeps its process. */
export type SleepState = "awake" | "falling_asleep" | "sleeping" | "waking";

interface Slot {
  plan: EnginePlan;
  runner: MachineRunner;
  tail: LogTail;
  file: LogFile | null;
  proc: EngineProcess | null;
  lastExit: ExitInfo | null;
  /** A previous herd's engine to take over instead of the first spawn (recover.ts). */
  adopt: EngineRecord | null;
  detach: (() => void) | null;
  sleep: SleepState;
  cordoned: boolean;
}

export class Supervisor {
  private readonly slots = new Map<string, Slot>();
  private readonly listeners = new Set<(w: Worker) => void>();
  private readonly records = new Map<string, EngineRecord>();
  private readonly recordFile: EngineRecordFile;
  private readonly log: Logger;
  private started = false;
  private stopping: Promise<void> | null = null;
  private allStopped: (() => void) | null = null;
  private recordWarned = false;
  private readonly addedListeners = new Set<(plan: EnginePlan) => void>();
  private hostGpus: HostGpus | null = null;
  private readonly leases: PortLeases | null;
  /** Ports a previous herd's live engines hold (recover.ts): planned again for the engine adopted, else freed before the spawn. */
  private held = new Set<number>();

  constructor(private readonly opts: SupervisorOptions) {
    this.log = opts.logger.child("supervisor");
    this.recordFile = new EngineRecordFile(join(opts.config.node.data_dir, "run", "engines.json"));
    if (opts.onChange) this.listeners.add(opts.onChange);
    this.leases = opts.leases !== undefined ? opts.leases : opts.plan?.isPortFree ? null : new PortLeases();
    if (this.leases?.problem) this.log.warn("port leases off: herds on this host may plan the same ports", { problem: this.leases.problem });
  }

  /**
   * The planners' port checker (plan.ts, scale.ts, src/pd/ports.ts through PlanOptions.finish): a
   * port is free when nothing binds it (or a previous herd's engine does, see start()) and no other
   * live herd on this host leases it; a free port is leased to this herd at once.
   */
  readonly portFree = (host: string, port: number): boolean => {
    const isFree = this.opts.plan?.isPortFree ?? canListen;
    if (!this.held.has(port) && !isFree(host, port)) return false;
    return this.leases ? this.leases.claim(port) : true;
  };

  /** Listen to worker changes; returns an unsubscribe function. */
  onChange(fn: (w: Worker) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  /**
   * Terminate engines a previous herd left running, plan ports and command lines, and start every
   * engine. Resolves once all are spawned (not ready: watch onChange or use waitFor). Throws on a
   * plan error (bad GPU split, unknown model), before anything is started.
   */
  async start(): Promise<void> {
    if (this.started) throw new Error("supervisor already started");
    this.started = true;
    const { config, clock } = this.opts;
    if (ownerIsAnotherLiveHerd(this.recordFile.owner())) {
      // Its engines are alive and supervised: "cleaning them up" would take down a running node.
      throw new Error(`another herd (pid ${this.recordFile.owner()!.pid}) is running with node.data_dir ${config.node.data_dir}; stop it or give each herd its own data_dir`);
    }
    const previous = this.recordFile.load();
    const live = liveRecords(previous);
    // Ports a previous engine still holds may be planned again: for that very engine if it is
    // adopted, otherwise it is terminated below before anything is spawned.
    this.held = heldPorts(live);
    const plans = planEngines(config, { ...this.opts.plan, isPortFree: this.portFree });
    this.held = new Set(); // reaped below or adopted; either way no longer a reason to plan them
    const { adopt, reap } = await sortLeftovers(live, plans, this.opts.probe ?? httpProbe, config.supervisor.health_timeout_ms);
    if (reap.length > 0) await reapLeftovers(reap, { stopTimeoutMs: config.supervisor.stop_timeout_ms, logger: this.log, clock });
    if (previous.length > 0) {
      this.log.info("checked engines recorded by the previous herd", { recorded: previous.length, adopted: adopt.size, terminated: reap.length });
    }
    // Adopted engines stay recorded even if stop() came meanwhile: the next herd finds them.
    for (const rec of adopt.values()) this.records.set(rec.worker, rec);
    this.saveRecords();
    // stop() may have been called while leftovers were being terminated: start nothing then.
    if (this.stopping) return;
    for (const plan of plans) this.slots.set(plan.id, this.makeSlot(plan, adopt.get(plan.id) ?? null));
    for (const slot of this.slots.values()) {
      this.log.info("engine", { worker: slot.plan.id, kind: slot.plan.kind, url: slot.plan.url, argv: slot.plan.spec ? redactArgv(slot.plan.spec.argv).join(" ") : "(external)", ...(slot.adopt ? { adopted_pid: slot.adopt.pid } : {}) });
      slot.runner.dispatch({ type: "start" });
    }
  }

  /** Drain (stop routing, wait for in-flight up to drainMs), then SIGTERM, SIGKILL after stop_timeout_ms. */
  stop(opts: { drainMs?: number } = {}): Promise<void> {
    if (this.stopping) return this.stopping;
    const { config, clock } = this.opts;
    const drainMs = opts.drainMs ?? config.frontend.drain_timeout_ms;
    this.stopping = new Promise<void>((resolve) => {
      // Bound the wait even if a process never dies (uninterruptible sleep on a wedged GPU).
      const guard = clock.setTimer(drainMs + config.supervisor.stop_timeout_ms + 5_000, () => {
        this.log.error("engines still running after the stop bound", { workers: this.live().join(",") });
        this.allStopped?.();
      });
      this.allStopped = () => {
        this.allStopped = null;
        guard.cancel();
        void this.finish().then(resolve);
      };
    });
    for (const slot of this.slots.values()) slot.runner.dispatch({ type: "stop", drainMs });
    if (this.live().length === 0) this.allStopped?.();
    return this.stopping;
  }

  /** Restart one worker now (kill + respawn; a failed worker gets a fresh crash budget). */
  restart(id: string): void {
    const slot = this.slot(id);
    if (this.stopping) throw new HerdError(409, "invalid_request_error", "herd is stopping", "stopping");
    this.log.info("restart requested", { worker: id });
    slot.runner.dispatch({ type: "restart" });
  }

  /** The planned workers (ids, urls, KV event endpoints, command lines); empty before start(). */
  plans(): EnginePlan[] {
    return [...this.slots.values()].map((s) => s.plan);
  }

  list(): Worker[] {
    return [...this.slots.values()].map((s) => this.snapshot(s));
  }

  status(): EngineStatus[] {
    return [...this.slots.values()].map((s) => ({
      worker: this.snapshot(s),
      phase: s.runner.state.phase,
      reason: s.runner.state.reason,
      pid: s.proc?.pid ?? null,
      crashes: s.runner.state.crashes,
      lastExit: s.lastExit,
      plan: s.plan,
      logFile: s.file?.path ?? null,
      sleep: s.sleep,
      cordoned: s.cordoned,
      lastError: s.runner.state.lastError,
    }));
  }

  /** The last supervisor.log_tail_lines lines of a worker's output (stdout and stderr interleaved). */
  logs(id: string): string[] {
    return this.slot(id).tail.lines();
  }

  /** Why a worker last crashed (see EngineStatus.lastError); null for an unknown id. */
  lastError(id: string): string | null {
    return this.slots.get(id)?.runner.state.lastError ?? null;
  }

  /** Resolve when `id` reaches one of `states` (e.g. ["ready"]); reject after timeoutMs. */
  waitFor(id: string, states: Worker["state"][], timeoutMs: number): Promise<Worker> {
    const slot = this.slot(id);
    const now = this.snapshot(slot);
    if (states.includes(now.state)) return Promise.resolve(now);
    return new Promise((resolve, reject) => {
      const timer = this.opts.clock.setTimer(timeoutMs, () => {
        off();
        reject(new Error(`${id} did not reach ${states.join("|")} within ${timeoutMs} ms (now ${this.snapshot(slot).state})`));
      });
      const off = this.onChange((w) => {
        if (w.id !== id || !states.includes(w.state)) return;
        off();
        timer.cancel();
        resolve(w);
      });
    });
  }

  // ── Scaling (the planner's actuator, src/planner/actuator-local.ts) ────────────────────────────
  // Additive: engines started by start() behave as before. A slot is never deleted: a stopped one is
  // reused (same id and log file) by the next addEngine() of its entry, so churn does not grow the table.

  /** Listen to engines added by addEngine() (e.g. to consume their KV events); returns an unsubscribe function. */
  onAdded(fn: (plan: EnginePlan) => void): () => void {
    this.addedListeners.add(fn);
    return () => this.addedListeners.delete(fn);
  }

  /**
   * Start one more engine from engines[entryIndex]: a fresh port (and KV ports), GPUs no live engine
   * holds, the driver's command line. Returns the worker id at once (the engine is `starting`).
   */
  addEngine(entryIndex: number): string {
    const { config } = this.opts;
    if (!this.started || this.stopping) throw new HerdError(409, "invalid_request_error", "the supervisor is not running", "not_running");
    if (!config.engines[entryIndex]) throw new HerdError(404, "not_found_error", `no engines[${entryIndex}]`, "entry_not_found");
    const all = [...this.slots.values()];
    const live = all.filter((s) => s.runner.state.phase !== "stopped" && s.runner.state.phase !== "failed");
    const reuse = all.find((s) => s.plan.entryIndex === entryIndex && s.plan.spec && (s.runner.state.phase === "stopped" || s.runner.state.phase === "failed"));
    const kind = config.engines[entryIndex]!.kind;
    const id = reuse?.plan.id ?? `${config.node.name}/${kind}-${all.filter((s) => s.plan.kind === kind).length}`;
    const index = reuse?.plan.index ?? all.filter((s) => s.plan.entryIndex === entryIndex).length;
    const plan = planAddedEngine({
      config, entryIndex, id, index,
      usedPorts: new Set(live.flatMap((s) => planPorts(s.plan))),
      usedGpus: new Set(live.flatMap((s) => s.plan.spec?.gpus ?? [])),
      host: (this.hostGpus ??= this.opts.plan?.hostGpus ?? detectGpus()),
      self: this.opts.plan?.self ?? selfCommand(),
      isPortFree: this.portFree,
    });
    const slot = this.makeSlot(plan, null);
    if (reuse) {
      reuse.runner.dispose();
      slot.tail = reuse.tail;
      slot.file = reuse.file ?? slot.file;
    }
    this.slots.set(id, slot);
    this.log.info("engine added", { worker: id, entry: entryIndex, url: plan.url, argv: plan.spec ? redactArgv(plan.spec.argv).join(" ") : undefined });
    for (const fn of this.addedListeners) fn(plan);
    slot.runner.dispatch({ type: "start" });
    return id;
  }

  /** Take an engine out of rotation before a stop (requests in flight finish; no new ones come). */
  drainEngine(id: string): void {
    const slot = this.slot(id);
    if (slot.cordoned) return;
    slot.cordoned = true;
    this.log.info("engine draining for removal", { worker: id });
    this.emit(slot);
  }

  /**
   * Stop one engine: out of rotation, wait for its in-flight requests (up to drainMs), SIGTERM, then
   * SIGKILL after stop_timeout_ms. Resolves once it is stopped. Idempotent.
   */
  async removeEngine(id: string, opts: { drainMs?: number } = {}): Promise<void> {
    const slot = this.slot(id);
    const { config } = this.opts;
    const drainMs = opts.drainMs ?? config.frontend.drain_timeout_ms;
    slot.cordoned = true;
    if (slot.runner.state.phase === "stopped" || slot.runner.state.phase === "failed") return;
    this.log.info("engine removal", { worker: id, drain_ms: drainMs });
    slot.runner.dispatch({ type: "stop", drainMs });
    await this.waitFor(id, ["stopped", "failed"], drainMs + config.supervisor.stop_timeout_ms + 5_000);
  }

  /** Put an idle engine to sleep (its driver's sleep mode); refused (409) with requests in flight. */
  async sleepEngine(id: string): Promise<void> {
    const slot = this.slot(id);
    const sleep = driverFor(slot.plan.kind).sleep;
    if (!sleep) throw new HerdError(409, "invalid_request_error", `${slot.plan.kind} engines have no sleep mode`, "no_sleep_mode");
    if (slot.sleep === "sleeping" || slot.sleep === "falling_asleep") return;
    if (slot.runner.state.phase !== "ready") throw new HerdError(409, "invalid_request_error", `${id} is ${slot.runner.state.phase}, not ready`, "not_ready");
    // Out of rotation first, then check: a request routed meanwhile keeps it awake.
    slot.sleep = "falling_asleep";
    this.emit(slot);
    if ((this.opts.inFlight?.(id) ?? 0) > 0) {
      slot.sleep = "awake";
      this.emit(slot);
      throw new HerdError(409, "invalid_request_error", `${id} has requests in flight`, "busy");
    }
    try {
      await postEngine(slot.plan.url + sleep.sleepPath, this.opts.config.supervisor.stop_timeout_ms);
    } catch (e) {
      slot.sleep = "awake";
      this.emit(slot);
      throw e;
    }
    slot.sleep = "sleeping";
    this.log.info("engine asleep", { worker: id });
    this.emit(slot);
  }

  /** Wake a sleeping engine; resolves once it takes traffic again. */
  async wakeEngine(id: string): Promise<void> {
    const slot = this.slot(id);
    const sleep = driverFor(slot.plan.kind).sleep;
    if (!sleep || slot.sleep === "awake" || slot.sleep === "waking") return;
    slot.sleep = "waking";
    this.emit(slot);
    try {
      await postEngine(slot.plan.url + sleep.wakePath, this.opts.config.supervisor.startup_timeout_ms);
    } catch (e) {
      slot.sleep = "sleeping";
      this.emit(slot);
      throw e;
    }
    slot.sleep = "awake";
    this.log.info("engine awake", { worker: id });
    this.emit(slot);
  }

  private emit(slot: Slot): void {
    const w = this.snapshot(slot);
    for (const fn of this.listeners) {
      try {
        fn(w);
      } catch (e) {
        this.log.error("worker change listener threw", { worker: w.id, error: errorMessage(e) });
      }
    }
  }

  private slot(id: string): Slot {
    const s = this.slots.get(id);
    if (!s) throw new HerdError(404, "not_found_error", `no worker ${JSON.stringify(id)} on this node`, "worker_not_found");
    return s;
  }

  private live(): string[] {
    return [...this.slots.values()].filter((s) => s.runner.state.phase !== "stopped").map((s) => s.plan.id);
  }

  private snapshot(s: Slot): Worker {
    return {
      id: s.plan.id,
      node: this.opts.config.node.name,
      model: s.plan.model,
      role: s.plan.role,
      kind: s.plan.kind,
      url: s.plan.url,
      state: routingState(s),
      load: emptyLoad(),
      restarts: s.runner.state.restarts,
    };
  }

  private makeSlot(plan: EnginePlan, adopt: EngineRecord | null): Slot {
    const { config, clock } = this.opts;
    const sup = config.supervisor;
    const probe = this.opts.probe ?? httpProbe;
    const healthy = driverFor(plan.kind).health.healthy;
    const log = this.log;
    const slot: Slot = {
      plan,
      tail: new LogTail(sup.log_tail_lines),
      file: plan.spec ? new LogFile(logPath(config.node.data_dir, plan.id)) : null,
      proc: null,
      lastExit: null,
      adopt,
      detach: null,
      sleep: "awake",
      cordoned: false,
      runner: undefined as unknown as MachineRunner,
    };
    const migrateAway = this.opts.migrateAway;
    slot.runner = new MachineRunner({ ...sup, managed: plan.spec !== null, migrateAtDrainDeadline: migrateAway !== undefined }, clock, {
      spawn: () => this.spawn(slot),
      signal: (sig) => slot.proc?.signal(sig),
      probe: () => probe(plan.url + plan.healthPath, sup.health_timeout_ms, healthy),
      inFlight: () => this.opts.inFlight?.(plan.id) ?? 0,
      migrate: () => migrateAway?.(plan.id),
      log: (level, msg, fields) => log[level](msg, { worker: plan.id, ...fields }),
      changed: (prev, next) => this.changed(slot, prev, next),
    });
    return slot;
  }

  private spawn(slot: Slot): void {
    const spec = slot.plan.spec;
    if (!spec || !slot.file) throw new Error(`${slot.plan.id} has no command line`);
    // A new process starts awake, whatever the previous one was.
    slot.sleep = "awake";
    const onExit = (info: ExitInfo) => {
      if (slot.proc !== proc) return;
      slot.proc = null;
      slot.detach = null;
      slot.lastExit = info;
      this.records.delete(slot.plan.id);
      this.saveRecords();
      slot.runner.dispatch({ type: "exited", code: info.code, signal: info.signal, lastError: this.causeOf(slot) });
    };
    const io = { tail: slot.tail, file: slot.file, onExit };
    let proc: EngineProcess;
    const adopted = slot.adopt;
    if (adopted) {
      // The first "spawn" takes over the previous herd's engine; restarts spawn as usual.
      slot.adopt = null;
      const attached = attachEngine(adopted, this.opts.clock, io);
      slot.detach = attached.detach;
      proc = attached;
      this.records.set(slot.plan.id, adopted);
      this.log.info("engine adopted from the previous herd", { worker: slot.plan.id, pid: adopted.pid, started_at: adopted.startedAt });
    } else {
      proc = spawnEngine(spec, io);
      const launch = { port: spec.port, argvHash: launchHash(spec), ports: specPorts(spec) };
      this.records.set(slot.plan.id, recordFor(slot.plan.id, proc.pid, new Date().toISOString(), launch));
      this.log.info("engine started", { worker: slot.plan.id, pid: proc.pid });
    }
    slot.proc = proc;
    this.saveRecords();
  }

  private changed(slot: Slot, prev: MachineState, next: MachineState): void {
    if (workerState(prev) !== workerState(next) || prev.restarts !== next.restarts) this.emit(slot);
    if (this.allStopped && this.live().length === 0) this.allStopped();
  }

  private async finish(): Promise<void> {
    for (const s of this.slots.values()) {
      s.runner.dispose();
      s.detach?.();
    }
    await Promise.all([...this.slots.values()].map((s) => s.file?.close()));
    this.saveRecords();
    // Adopted engines stay recorded for the next herd, which leases their ports again on start.
    this.leases?.release();
  }

  /**
   * Why an engine's process exited, as one line: a planned port something else now holds (taken
   * between planning and bind: by another herd when it leases it, else by another process), else
   * the last error line of the engine's own output.
   */
  private causeOf(slot: Slot): string | null {
    const line = lastErrorLine(slot.tail.lines());
    const spec = slot.plan.spec;
    if (!spec || this.stopping) return line;
    const checks: PortCheck[] = planPorts(slot.plan).map((port) => ({ port, host: port === spec.port ? spec.host : "0.0.0.0" }));
    const isFree = this.opts.plan?.isPortFree ?? canListen;
    const lost = lostPorts(checks, line, (c) => isFree(c.host, c.port), (p) => this.leases?.holder(p)?.pid ?? null);
    if (lost === null) return line;
    this.log.warn("engine port lost between planning and bind", { worker: slot.plan.id, port: lost.port, holder: lost.holder, last_error: line });
    return lost.message;
  }

  private saveRecords(): void {
    try {
      this.recordFile.save([...this.records.values()]);
    } catch (e) {
      if (!this.recordWarned) this.log.warn("cannot write the engine record; leftovers after a crash will not be found", { path: this.recordFile.path, error: errorMessage(e) });
      this.recordWarned = true;
    }
  }
}

/** What routing sees: a ready engine that is asleep (or waking) or drained for removal takes no traffic. */
function routingState(s: Slot): Worker["state"] {
  const st = workerState(s.runner.state);
  return st === "ready" && (s.cordoned || s.sleep !== "awake") ? "draining" : st;
}
