// `herd run`: one Config in, one running node out. The node's parts and their services are built in
// node.ts; here the run's seed is resolved and logged, the services start in order (a failed start
// stops what started, in reverse), and signals drain, stop and reload them.
// "herd ready" is logged, and systemd gets READY=1, when the listener is up and the first worker is
// ready. SIGTERM/SIGINT: drain (health 503, new requests 503, admitted streams get
// frontend.drain_timeout_ms), then stop engines, exit 0. A second signal skips the wait — unless it
// comes within 500 ms of the first, which is the same Ctrl-C delivered twice. SIGHUP reloads the
// config file: live keys apply at once, the rest are named as needing a restart and kept. The signal
// handling itself is in src/daemon/signals.ts, systemd notification in src/daemon/notify.ts.
import { RealClock, type Clock } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import { createLogger, type Logger } from "../core/log.ts";
import { ServiceGroup, ServiceStartError } from "../core/service.ts";
import { resolveSeed } from "../core/seed.ts";
import { NOOP_TRACER } from "../core/trace.ts";
import type { Config } from "../config/types.ts";
import type { Overrides } from "../config/load.ts";
import { checkConfigFiles } from "../config/files.ts";
import { renderFindings } from "../config/findings.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { Supervisor } from "../engine/supervisor.ts";
import { driverFor } from "../engine/drivers/registry.ts";
import type { HerdMetrics } from "../metrics/herd-metrics.ts";
import type { Router } from "../router/index.ts";
import type { KvConsumer } from "../kv/consumer.ts";
import type { SharedPreprocessor } from "../preprocess/shared.ts";
import type { TierService } from "../tier/service.ts";
import type { PlannerService } from "../planner/service.ts";
import type { ClusterNode } from "../cluster/node.ts";
import type { Frontend } from "../frontend/app.ts";
import { bodyBackstopBytes } from "../frontend/server.ts";
import { systemdNotifier, type Notifier } from "./notify.ts";
import { DaemonSignals, reloadConfig } from "./signals.ts";
import { HerdNode, type PdTraceEntry } from "./node.ts";
import { startTracing } from "./tracing.ts";

export interface DaemonOptions {
  configPath: string | null;
  /** Command-line overrides (`herd run --listen`), re-applied to the file on every SIGHUP reload. */
  overrides?: Overrides;
  /** Install SIGTERM/SIGINT/SIGHUP handlers (runDaemon does; in-process tests and benches do not). */
  signals?: boolean;
  logger?: Logger;
  clock?: Clock;
}

export interface Daemon {
  url: string;
  /** The run's seed (config `seed`, HERD_SEED, or drawn at start): every Rng derives from it. */
  seed: number;
  /** The host's KV tier (`tier.enabled` false when kv_tier configures nothing). */
  tier: TierService;
  /** The planner, when planner.enabled. */
  planner: PlannerService | null;
  registry: WorkerRegistry;
  router: Router;
  supervisor: Supervisor;
  /** KV event consumers of every worker with KV endpoints, feeding the shared block index. */
  kv: KvConsumer;
  /** Prompt tokenization + block hashes per model, shared by routing and /admin/route/explain. */
  prompts: SharedPreprocessor;
  frontend: Frontend;
  metrics: HerdMetrics;
  /** Membership, leader and the other nodes' workers (src/cluster); a one-node file cluster by default. */
  cluster: ClusterNode;
  /** The last P/D requests' traces (bounded, newest last); empty without P/D models. */
  pdTraces: readonly PdTraceEntry[];
  /** Resolves when at least one worker is ready. */
  firstReady: Promise<void>;
  /** Drain and stop everything; resolves with the exit code. Idempotent. `force` skips the drain wait. */
  shutdown(force?: boolean): Promise<number>;
  /** Resolves with the exit code once shutdown has finished. */
  done: Promise<number>;
}

/** Entry point used by the CLI: start, wait for a signal, return the exit code. */
export async function runDaemon(config: Config, opts: DaemonOptions): Promise<number> {
  // Every file the config names (tokenizers, local model paths, engine commands) before anything
  // binds or spawns (src/config/files.ts): a typo must not cost an engine start.
  const missing = checkConfigFiles(config, opts.configPath, (kind) => driverFor(kind).loadsModelPath);
  if (missing.length) {
    process.stderr.write(`${renderFindings(missing, opts.configPath)}\nherd: not started: ${missing.length} file${missing.length === 1 ? "" : "s"} named by the config cannot be used\n`);
    return 1;
  }
  let daemon: Daemon;
  try {
    daemon = await startDaemon(config, { signals: true, ...opts });
  } catch (e) {
    (opts.logger ?? createLogger("herd")).error("herd failed to start", { err: errorMessage(e) });
    return 1;
  }
  return daemon.done;
}

export async function startDaemon(config: Config, opts: DaemonOptions): Promise<Daemon> {
  const log = opts.logger ?? createLogger("herd");
  const clock = opts.clock ?? new RealClock();
  const notify = systemdNotifier(log);
  // One seed drives every Rng of this node; logged so the run's routing can be replayed.
  const { seed, source } = resolveSeed(config.seed);
  log.info("seed", { seed, source, replay: `HERD_SEED=${seed}`, ...(config.router.seed !== 0 ? { router_seed: config.router.seed } : {}) });
  // Tracing off: no SDK is loaded (src/core/trace.ts NOOP_TRACER).
  const tracer = config.tracing.enabled ? await startTracing(config, log.child("tracing")) : NOOP_TRACER;
  const node = new HerdNode(config, { configPath: opts.configPath, log, clock, seed, notify, tracer });
  const services = new ServiceGroup(node.services(), log);
  // Signals during startup are remembered and acted on once it is done (src/daemon/signals.ts).
  const signals = new DaemonSignals(log, opts.signals === true);
  try {
    await services.start();
  } catch (e) {
    signals.dropEarly();
    // The service's own error, as it would read without the group around it.
    throw e instanceof ServiceStartError && e.cause instanceof Error ? e.cause : e;
  }
  const stop = stopper(node, services, signals, notify, log, clock);
  const configPath = opts.configPath;
  const maxBodyBytesLive = bodyBackstopBytes(config.frontend.max_body_bytes);
  signals.install({
    stop: (force) => void stop.shutdown(force),
    stopping: () => stop.started,
    reload:
      configPath === null
        ? null
        : () => reloadConfig(configPath, { overrides: opts.overrides ?? {}, running: node.running, maxBodyBytesLive, log, apply: (next) => node.apply(next) }),
  });
  return {
    url: node.url, seed, tier: node.tier, planner: node.planner, registry: node.registry, cluster: node.cluster,
    get router() {
      return node.router; // a getter: a reload may replace it
    },
    supervisor: node.supervisor, kv: node.kv, prompts: node.prompts, frontend: node.frontend, metrics: node.metrics, pdTraces: node.pdTraces,
    firstReady: node.readiness.firstReady, shutdown: stop.shutdown, done: stop.done,
  };
}

/**
 * SIGTERM/SIGINT, in Dynamo's order (leave routing everywhere, a short grace, then drain): first
 * /health turns 503 and this node's workers are published as draining, so peers and balancers stop
 * routing here while requests already on their way are still served; after
 * frontend.leave_grace_ms (only when other nodes route here) new requests get 503, admitted ones
 * get drain_timeout_ms; then the services stop in reverse. A second stop signal skips the waits.
 */
function stopper(node: HerdNode, services: ServiceGroup, signals: DaemonSignals, notify: Notifier, log: Logger, clock: Clock) {
  let resolveDone: (code: number) => void = () => {};
  const done = new Promise<number>((r) => (resolveDone = r));
  let shuttingDown: Promise<number> | null = null;
  let forceNow: () => void = () => {};
  const drain = async (force: boolean) => {
    const { frontend } = node;
    const drainMs = node.running.frontend.drain_timeout_ms;
    let forcedLater = false; // a second stop signal during the wait: say so, not "drain bound reached"
    const forced = new Promise<boolean>((r) => (forceNow = () => ((forcedLater = true), r(false))));
    frontend.startLeave();
    node.cluster.publishNow(); // other nodes stop routing here (our workers read `draining`)
    notify.send(["STOPPING=1", "STATUS=leaving routing"]);
    const graceMs = node.cluster.livePeers().length > 0 ? node.running.frontend.leave_grace_ms : 0;
    if (!force && graceMs > 0) {
      log.info("leaving routing", { leave_grace_ms: graceMs });
      await Promise.race([clock.sleep(graceMs), forced]);
    }
    frontend.startDrain();
    notify.send(["STATUS=draining"]);
    log.info("draining", { in_flight: frontend.inFlightCount, drain_timeout_ms: drainMs });
    const idle = force ? false : await Promise.race([frontend.waitIdle(drainMs), forced]);
    const migrateMs = node.running.frontend.migration_grace_ms;
    if (!idle && frontend.inFlightCount > 0 && !force && !forcedLater && migrateMs > 0 && node.running.frontend.migration_limit > 0) {
      // Issue 21: what still runs at the deadline moves to other nodes' workers instead of being
      // cut. This node's own workers leave routing first (they stop with herd), then the requests
      // are aborted as `drain`: streams migrate, attempts before their first byte are retried
      // elsewhere. The frontend and the cluster keep running (services stop after this), so the
      // moved streams are relayed from their new worker for up to migration_grace_ms.
      // Only attempts on this node's workers move: a stream already relayed from a peer's worker
      // keeps going as it is.
      const own = node.registry.list().filter((w) => w.node === node.running.node.name);
      for (const w of own) node.registry.cordon(w.id, true);
      let moved = 0;
      for (const w of own) moved += frontend.migrateAway(w.id);
      log.info("drain bound reached; migrating open requests to other nodes", { in_flight: moved, migration_grace_ms: migrateMs });
      const migratedIdle = await Promise.race([frontend.waitIdle(migrateMs), forced]);
      if (migratedIdle) return;
    }
    if (frontend.inFlightCount > 0) {
      log.warn("drain bound reached; ending open requests", { in_flight: frontend.inFlightCount });
      frontend.abortAll(force || forcedLater ? "herd is stopping now" : `herd is shutting down (drain bound ${drainMs} ms reached)`);
      await frontend.waitIdle(1000); // let the error events reach the clients
    }
  };
  const shutdown = (force = false): Promise<number> => {
    if (shuttingDown) {
      if (force) forceNow();
      return shuttingDown;
    }
    shuttingDown = (async () => {
      await drain(force);
      await services.stop();
      signals.remove();
      log.info("herd stopped");
      resolveDone(0);
      return 0;
    })().catch((e) => {
      log.error("shutdown failed", { err: errorMessage(e) });
      signals.remove();
      resolveDone(1);
      return 1;
    });
    return shuttingDown;
  };
  return {
    shutdown,
    done,
    get started() {
      return shuttingDown !== null;
    },
  };
}

// Moved to the engine drivers (drivers/<kind>.ts kvCapacity); re-exported for tests and tools.
