// `herd run`: one Config in, one running node out. The daemon only wires parts together; each part
// owns its behaviour:
//   Supervisor (engine processes) ──onChange──▶ WorkerRegistry ◀── MetricsScraper (engine /metrics)
//                                                   ▲   │
//                                 Router (leases) ──┘   └──▶ Frontend (OpenAI API, /admin, /metrics)
// KV-aware routing: the KvConsumer's block index is created before the Router and handed to its
// `kv` policy; one SharedPreprocessor (tokenizer + block hashes per model, src/preprocess) serves the
// frontend's routing and /admin/route/explain alike, so both hash a prompt the same way.
// Lifecycle: listen first (a taken port fails fast, before any engine starts), then start engines
// (and, for kv/prefix, the tokenizers alongside; one that cannot load stops the start).
// "herd ready" is logged, and systemd gets READY=1, when the listener is up and the first worker is
// ready. SIGTERM/SIGINT: drain (health 503, new requests 503, admitted streams get
// frontend.drain_timeout_ms), then stop engines, exit 0. A second signal skips the wait — unless it
// comes within 500 ms of the first, which is the same Ctrl-C delivered twice. SIGHUP reloads the
// config file: live keys apply at once, the rest are named as needing a restart and kept. The signal
// handling itself is in src/daemon/signals.ts, systemd notification in src/daemon/notify.ts.
import { RealClock, type Clock } from "../core/clock.ts";
import { errorMessage } from "../core/errors.ts";
import { createLogger, type Logger } from "../core/log.ts";
import type { Config } from "../config/types.ts";
import { WorkerRegistry } from "../workers/registry.ts";
import { Supervisor } from "../engine/supervisor.ts";
import type { EnginePlan } from "../engine/types.ts";
import { kvCapacityHint } from "../engine/drivers.ts";
import { HerdMetrics } from "../metrics/herd-metrics.ts";
import { Router, type RouteRequest } from "../router/index.ts";
import { MetricsScraper } from "../engine/telemetry/scrape.ts";
import { Frontend } from "../frontend/app.ts";
import { bodyBackstopBytes, listen, parseListen, type Listening } from "../frontend/server.ts";
import type { AdminBackend } from "../admin/routes.ts";
import { kvAdminBackend } from "../admin/kv-explain.ts";
import { KvConsumer } from "../kv/consumer.ts";
import { SharedPreprocessor, policyNeedsPrompt } from "../preprocess/shared.ts";
import type { Overrides } from "../config/load.ts";
import { exposureInfo, exposureWarnings } from "./exposure.ts";
import { systemdNotifier } from "./notify.ts";
import { DaemonSignals, reloadConfig } from "./signals.ts";
import { Readiness } from "./readiness.ts";
import { TierService } from "../tier/service.ts";
import { PlannerService } from "../planner/service.ts";
import { LocalActuator } from "../planner/actuator-local.ts";
import { PlannerMetrics } from "../planner/metrics.ts";
import { detectGpus } from "../engine/gpus.ts";
import { ServiceGroup, ServiceStartError, service, type Service } from "../core/service.ts";
import { resolveSeed } from "../core/seed.ts";
import { wallClockMs } from "../core/clock.ts";
import { claimRuntimeFile, type RuntimeFile } from "./runtime-file.ts";
import { checkConfigFiles } from "../config/files.ts";
import { renderFindings } from "../config/findings.ts";
import { canListen } from "../engine/plan.ts";
import { applyPdLaunch, hasPdRoles } from "../pd/launch.ts";
import { NixlMetadataService } from "../pd/nixl-metadata.ts";
import { pdModels } from "../pd/launch.ts";
import { explainPd, pdPlanBuilder, type PdPlanDeps } from "../pd/plan.ts";
import { PdMetrics } from "../pd/metrics.ts";
import type { PdTrace } from "../pd/orchestrator.ts";
import { SeededRng } from "../core/rng.ts";

/** The last P/D requests' traces kept for inspection (both legs, the terms that chose each). */
export interface PdTraceEntry {
  requestId: string;
  trace: PdTrace;
}
const PD_TRACES_MAX = 256;

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
  const missing = checkConfigFiles(config, opts.configPath);
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
  // What runs now: `config` plus the live keys of every SIGHUP reload since (src/daemon/reload.ts).
  let running = config;
  const registry = new WorkerRegistry(log.child("registry"));
  // The block index every reader shares: fed by the engines' KV events, read by the kv policy and explain.
  const kv = new KvConsumer({ clock, log });
  // router.seed pins the router's own stream; otherwise it is the run's seed.
  const router = new Router({ config: config.router, registry, clock, seed: config.router.seed !== 0 ? config.router.seed : seed, log: log.child("router"), kvIndex: kv.index });
  const prompts = new SharedPreprocessor(config.models, { log: log.child("preprocess") });
  const metrics = new HerdMetrics(
    config.models.map((m) => m.name),
    () => registry.list(),
  );
  // P/D (issue 13): herd's NIXL metadata service when an engine has a P/D role and
  // pd.nixl_metadata is herd; role flags and side-channel ports complete the engine plan.
  const nixl = config.pd.nixl_metadata === "herd" && hasPdRoles(config)
    ? new NixlMetadataService({ host: config.node.advertise, port: 0, clock, log: log.child("nixl-metadata") })
    : null;
  const listenPort = parseListen(config.frontend.listen).port;
  const finish = (plans: EnginePlan[]) => {
    const lines = applyPdLaunch(config, plans, { isPortFree: (p) => canListen("0.0.0.0", p), reserved: [listenPort, ...(nixl ? [nixl.port] : [])], nixlEndpoint: () => nixl?.endpoint ?? null });
    for (const line of lines) log.info(`P/D ${line}`);
  };
  const supervisor = new Supervisor({ config, clock, logger: log, inFlight: (id) => registry.inFlightOf(id), onChange: (w) => registry.upsert(w), plan: { finish } });
  const known = (id: string) => supervisor.list().some((w) => w.id === id);
  // An operator's drain is a cordon in the registry (the one place drain state of a worker lives).
  const cordon = (id: string, on: boolean): boolean => {
    if (!known(id) || !registry.cordon(id, on)) return false;
    log.info(`worker ${on ? "drained" : "undrained"} by admin`, { worker: id });
    return true;
  };
  // P/D (issue 13): models with prefill and decode engines run the P/D plan; others today's plan.
  const pdTraces: PdTraceEntry[] = [];
  const pdDeps: PdPlanDeps | null = pdModels(config).size > 0
    ? {
        config, registry, router, kvIndex: kv.index, clock, rng: new SeededRng(seed).fork(), log: log.child("pd"),
        observer: new PdMetrics(metrics.registry),
        onTrace: (requestId, trace) => {
          pdTraces.push({ requestId, trace });
          if (pdTraces.length > PD_TRACES_MAX) pdTraces.shift();
        },
      }
    : null;
  const pdPlan = pdDeps ? pdPlanBuilder(pdDeps) : null;
  const admin: AdminBackend = {
    ...kvAdminBackend(config, kv, prompts),
    logs: (id, lines) => (known(id) ? supervisor.logs(id).slice(-lines) : null),
    pid: (id) => supervisor.status().find((s) => s.worker.id === id)?.pid ?? null,
    drain: (id) => cordon(id, true),
    undrain: (id) => cordon(id, false),
    ...(pdDeps ? { pdExplain: (route: RouteRequest) => explainPd(pdDeps, route), pdTraces: () => [...pdTraces] } : {}),
  };
  const frontend = new Frontend({ config, registry, router, metrics, clock, log: log.child("frontend"), admin, prompts, ...(pdPlan ? { plan: pdPlan } : {}) });
  const scraper = new MetricsScraper({
    registry, clock, intervalMs: config.router.metrics_scrape_interval_ms, log: log.child("scrape"),
    // vLLM states its KV capacity in /metrics when no flag gave it: size the index for it.
    onKvCapacity: (id, blocks) => kv.ingest.setCapacity(id, blocks),
  });

  const tier = new TierService({ config, clock });
  // The planner (off unless planner.enabled): scales the listed engines[] entries through the
  // supervisor; engines it adds join the KV ingest like the planned ones.
  const planner = config.planner.enabled
    ? new PlannerService({
        config, clock, log,
        actuator: new LocalActuator({ config, supervisor, clock, log: log.child("actuator"), inFlight: (id) => registry.inFlightOf(id), hostGpus: detectGpus().ids.length }),
        metrics: new PlannerMetrics(metrics.registry),
      })
    : null;
  if (tier.enabled) tier.registerMetrics(metrics.registry);
  let listening: Listening | null = null;
  let runtime: RuntimeFile | null = null;
  const url = () => listening?.url ?? config.frontend.listen;
  // With the planner scaling every engines[] entry from zero, no worker is ready at start, by design.
  const scaledFromZero = planner !== null && config.engines.length > 0 && config.engines.every((_, i) => config.planner.pools.some((p) => p.engine === i && p.min === 0));
  const readiness = new Readiness({ registry, notify, clock, log, url, readyWithoutWorkers: scaledFromZero });
  const hashPrompts = policyNeedsPrompt(router);
  // Started first to last, stopped last to first (src/core/service.ts). Listen first: a taken port
  // fails before any engine starts. Tokenizers load while the engines warm up (start() only spawns).
  const services = new ServiceGroup(
    [
      // First: refuse a data dir another live herd owns, else record this daemon there so
      // `herd status|drain|logs` find it (src/daemon/runtime-file.ts).
      service(
        "runtime-file",
        () => void (runtime = claimRuntimeFile(config, opts.configPath, new Date(wallClockMs()).toISOString())),
        () => runtime?.release(),
      ),
      service(
        "listener",
        () => {
          const { host, port } = parseListen(config.frontend.listen);
          try {
            listening = listen(frontend, host, port, config.frontend.max_body_bytes);
          } catch (e) {
            throw new Error(`cannot listen on ${config.frontend.listen}: ${errorMessage(e)}`);
          }
          runtime?.listening(listening.url);
          log.info("listening", { url: listening.url, config: opts.configPath ?? "(embedded default)", policy: router.policy.name });
        },
        async () => {
          await listening?.stop(true);
          frontend.close();
        },
      ),
      // Before the supervisor: engines get its endpoint in their environment. A departed worker's
      // agent metadata goes when its connection closes (orphan grace): herd does not know the
      // NIXL agent names (vLLM names its agent by engine id), so dropAgent is not called here.
      ...(nixl ? [nixl] : []),
      service(
        "supervisor",
        async () => {
          await supervisor.start();
          for (const w of supervisor.list()) registry.upsert(w);
          for (const line of exposureWarnings(config, supervisor.plans())) log.warn(line);
          for (const line of exposureInfo(config)) log.info(line);
        },
        () => supervisor.stop({ drainMs: 0 }),
      ),
      service(
        "preprocess",
        async () => {
          // Policies that read block hashes need every tokenizer before the first request.
          if (!hashPrompts) return;
          await prompts.start().catch((e: unknown) => {
            throw new Error(`router.policy ${router.policy.name} needs each model's tokenizer, which cannot be loaded: ${errorMessage(e)}`);
          });
        },
        () => prompts.close(),
      ),
      kvIngestService(config, kv, supervisor),
      // The host's KV tier (off unless kv_tier configures a medium, a RESP server or a shared dir).
      service("kv-tier", () => tier.start(), () => tier.stop()),
      service("scraper", () => scraper.start(), () => scraper.stop()),
      ...(planner ? [planner] : []),
      readiness,
    ],
    log,
  );

  // Signals during startup are remembered and acted on once it is done (src/daemon/signals.ts).
  const signals = new DaemonSignals(log, opts.signals === true);
  try {
    await services.start();
  } catch (e) {
    signals.dropEarly();
    // The service's own error, as it would read without the group around it.
    throw e instanceof ServiceStartError && e.cause instanceof Error ? e.cause : e;
  }

  let resolveDone: (code: number) => void = () => {};
  const done = new Promise<number>((r) => (resolveDone = r));
  let shuttingDown: Promise<number> | null = null;
  let forceNow: () => void = () => {};
  const shutdown = (force = false): Promise<number> => {
    if (shuttingDown) {
      if (force) forceNow();
      return shuttingDown;
    }
    shuttingDown = (async () => {
      const drainMs = running.frontend.drain_timeout_ms;
      frontend.startDrain();
      notify.send(["STOPPING=1", "STATUS=draining"]);
      log.info("draining", { in_flight: frontend.inFlightCount, drain_timeout_ms: drainMs });
      let forcedLater = false; // a second stop signal during the wait: say so, not "drain bound reached"
      const forced = new Promise<boolean>((r) => (forceNow = () => ((forcedLater = true), r(false))));
      const idle = force ? false : await Promise.race([frontend.waitIdle(drainMs), forced]);
      if (!idle && frontend.inFlightCount > 0) {
        log.warn("drain bound reached; ending open requests", { in_flight: frontend.inFlightCount });
        frontend.abortAll(force || forcedLater ? "herd is stopping now" : `herd is shutting down (drain bound ${drainMs} ms reached)`);
        await frontend.waitIdle(1000); // let the error events reach the clients
      }
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

  const configPath = opts.configPath;
  const maxBodyBytesLive = bodyBackstopBytes(config.frontend.max_body_bytes);
  const apply = (next: Config) => {
    running = next;
    frontend.applyConfig(next);
  };
  signals.install({
    stop: (force) => void shutdown(force),
    stopping: () => shuttingDown !== null,
    reload: configPath === null ? null : () => reloadConfig(configPath, { overrides: opts.overrides ?? {}, running, maxBodyBytesLive, log, apply }),
  });

  return { url: url(), seed, tier, planner, registry, router, supervisor, kv, prompts, frontend, metrics, pdTraces, firstReady: readiness.firstReady, shutdown, done };
}

/**
 * KV events as a service: every worker with endpoints (generated for local engines, from config for
 * external ones) feeds the shared block index; the supervisor's state changes take failed, stopped
 * and restarted engines out of it.
 */
function kvIngestService(config: Config, kv: KvConsumer, supervisor: Supervisor): Service {
  let unwatch: (() => void) | null = null;
  let unwatchAdded: (() => void) | null = null;
  const addPlan = (p: EnginePlan) => {
    if (!p.kvEvents) return;
    const blockSize = config.models.find((m) => m.name === p.model)?.block_size ?? 16;
    const kvBlocks = kvCapacityHint(p);
    kv.add({
      id: p.id, model: p.model, blockSize, endpoint: p.kvEvents.endpoint, replayEndpoint: p.kvEvents.replayEndpoint, topic: p.kvEvents.topic,
      ...(kvBlocks !== undefined ? { kvBlocks } : {}),
    });
  };
  return service(
    "kv-ingest",
    () => {
      for (const p of supervisor.plans()) addPlan(p);
      unwatch = supervisor.onChange((w) => kv.observe(w));
      for (const w of supervisor.list()) kv.observe(w);
      // Engines the planner adds later read their KV events like the planned ones.
      unwatchAdded = supervisor.onAdded((p) => addPlan(p));
    },
    () => {
      unwatch?.();
      unwatchAdded?.();
      kv.close();
    },
  );
}

// Moved to the engine drivers (drivers/<kind>.ts kvCapacity); re-exported until the daemon is rewired.
export { kvCapacityHint } from "../engine/drivers.ts";
