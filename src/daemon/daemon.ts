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
import type { Worker } from "../workers/worker.ts";
import { Supervisor } from "../engine/supervisor.ts";
import type { EnginePlan } from "../engine/types.ts";
import { parseSimArgs } from "../engine/sim/options.ts";
import { HerdMetrics } from "../metrics/herd-metrics.ts";
import { Router } from "../router/index.ts";
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
  registry: WorkerRegistry;
  router: Router;
  supervisor: Supervisor;
  /** KV event consumers of every worker with KV endpoints, feeding the shared block index. */
  kv: KvConsumer;
  /** Prompt tokenization + block hashes per model, shared by routing and /admin/route/explain. */
  prompts: SharedPreprocessor;
  frontend: Frontend;
  metrics: HerdMetrics;
  /** Resolves when at least one worker is ready. */
  firstReady: Promise<void>;
  /** Drain and stop everything; resolves with the exit code. Idempotent. `force` skips the drain wait. */
  shutdown(force?: boolean): Promise<number>;
  /** Resolves with the exit code once shutdown has finished. */
  done: Promise<number>;
}

/** Entry point used by the CLI: start, wait for a signal, return the exit code. */
export async function runDaemon(config: Config, opts: DaemonOptions): Promise<number> {
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
  // What runs now: `config` plus the live keys of every SIGHUP reload since (src/daemon/reload.ts).
  let running = config;
  const registry = new WorkerRegistry(log.child("registry"));
  // The block index every reader shares: fed by the engines' KV events, read by the kv policy and explain.
  const kv = new KvConsumer({ clock, log });
  const router = new Router({ config: config.router, registry, clock, log: log.child("router"), kvIndex: kv.index });
  const prompts = new SharedPreprocessor(config.models, { log: log.child("preprocess") });
  const metrics = new HerdMetrics(
    config.models.map((m) => m.name),
    () => registry.list(),
  );

  // Workers an operator drained through /admin stay out of rotation across the supervisor's own
  // state changes (a health flip must not silently put them back) until undrained.
  const adminDrained = new Set<string>();
  const publish = (w: Worker) => registry.upsert(adminDrained.has(w.id) && w.state === "ready" ? { ...w, state: "draining" } : w);
  const supervisor = new Supervisor({ config, clock, logger: log, inFlight: (id) => registry.inFlightOf(id), onChange: publish });
  const known = (id: string) => supervisor.list().find((w) => w.id === id);
  const setAdminDrained = (id: string, drained: boolean): boolean => {
    const w = known(id);
    if (!w) return false;
    if (drained) adminDrained.add(id);
    else adminDrained.delete(id);
    publish(w);
    log.info(`worker ${drained ? "drained" : "undrained"} by admin`, { worker: id });
    return true;
  };
  const admin: AdminBackend = {
    ...kvAdminBackend(config, kv, prompts),
    logs: (id, lines) => (known(id) ? supervisor.logs(id).slice(-lines) : null),
    pid: (id) => supervisor.status().find((s) => s.worker.id === id)?.pid ?? null,
    drain: (id) => setAdminDrained(id, true),
    undrain: (id) => setAdminDrained(id, false),
  };
  const frontend = new Frontend({ config, registry, router, metrics, clock, log: log.child("frontend"), admin, prompts });

  const { host, port } = parseListen(config.frontend.listen);
  let listening: Listening;
  try {
    listening = listen(frontend, host, port, config.frontend.max_body_bytes);
  } catch (e) {
    frontend.close();
    throw new Error(`cannot listen on ${config.frontend.listen}: ${errorMessage(e)}`);
  }
  log.info("listening", { url: listening.url, config: opts.configPath ?? "(embedded default)", policy: router.policy.name });

  // Signals during startup are remembered and acted on once it is done (src/daemon/signals.ts).
  const signals = new DaemonSignals(log, opts.signals === true);
  // Policies that read block hashes need the tokenizers before the first request: load them while
  // the engines start (a settled promise: the failure is handled below, never unhandled).
  const promptsReady = policyNeedsPrompt({ policy: router.policy.name })
    ? prompts.start().then(
        () => null,
        (e: unknown) => e,
      )
    : Promise.resolve(null);
  try {
    await supervisor.start();
  } catch (e) {
    signals.dropEarly();
    await promptsReady;
    prompts.close();
    await listening.stop(true);
    frontend.close();
    throw e;
  }
  const promptsFailed = await promptsReady;
  if (promptsFailed !== null) {
    signals.dropEarly();
    await supervisor.stop({ drainMs: 0 });
    prompts.close();
    await listening.stop(true);
    frontend.close();
    throw new Error(`router.policy ${router.policy.name} needs each model's tokenizer, which cannot be loaded: ${errorMessage(promptsFailed)}`);
  }
  for (const w of supervisor.list()) publish(w);
  for (const line of exposureWarnings(config, supervisor.plans())) log.warn(line);
  for (const line of exposureInfo(config)) log.info(line);
  // KV events: every worker with endpoints (generated for local engines, from config for external
  // ones); the supervisor's state changes take failed/stopped/restarted engines out of the index.
  for (const p of supervisor.plans()) {
    if (!p.kvEvents) continue;
    const blockSize = config.models.find((m) => m.name === p.model)?.block_size ?? 16;
    const kvBlocks = kvCapacityHint(p);
    kv.add({
      id: p.id, model: p.model, blockSize, endpoint: p.kvEvents.endpoint, replayEndpoint: p.kvEvents.replayEndpoint, topic: p.kvEvents.topic,
      ...(kvBlocks !== undefined ? { kvBlocks } : {}),
    });
  }
  const unwatchKv = supervisor.onChange((w) => kv.observe(w));
  for (const w of supervisor.list()) kv.observe(w);
  const scraper = new MetricsScraper({ registry, clock, intervalMs: config.router.metrics_scrape_interval_ms, log: log.child("scrape") });
  scraper.start();

  // Readiness: the first ready worker completes startup (log line + READY=1).
  let resolveReady: () => void = () => {};
  const firstReady = new Promise<void>((r) => (resolveReady = r));
  const summary = () => {
    const ws = registry.list();
    return `${ws.filter((w) => w.state === "ready").length}/${ws.length} ready`;
  };
  let ready = false;
  let readySent = false;
  const onReadyCheck = () => {
    if (ready || !registry.list().some((w) => w.state === "ready")) return;
    ready = true;
    readySent = true;
    const models = [...new Set(registry.list().map((w) => w.model))].join(",");
    log.info(`herd ready: listening on ${listening.url} workers ${summary()} models ${models}`);
    notify.send(["READY=1", `STATUS=serving on ${listening.url}, workers ${summary()}`]);
    resolveReady();
  };
  const unwatchReady = registry.onChange((c) => {
    if (c.type === "load") return;
    onReadyCheck();
    if (ready && c.type === "updated") notify.send([`STATUS=serving on ${listening.url}, workers ${summary()}`]);
  });
  onReadyCheck();
  // Model loading can outlast systemd's TimeoutStartSec: keep extending it while engines start.
  const extendTimer = notify.enabled
    ? setInterval(() => {
        if (readySent) return;
        const starting = registry.list().some((w) => w.state === "starting");
        // No engine left starting and none ready: herd itself is up (answering 503s), say so.
        notify.send(starting ? ["EXTEND_TIMEOUT_USEC=60000000", `STATUS=waiting for engines: ${summary()}`] : ["READY=1", "STATUS=no worker could start; serving 503s"]);
        if (!starting) readySent = true;
      }, 20_000)
    : null;

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
      if (extendTimer) clearInterval(extendTimer);
      unwatchReady();
      await scraper.stop();
      await supervisor.stop({ drainMs: 0 });
      unwatchKv();
      kv.close();
      await listening.stop(true);
      frontend.close();
      prompts.close();
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

  return { url: listening.url, registry, router, supervisor, kv, prompts, frontend, metrics, firstReady, shutdown, done };
}

/**
 * An engine's KV capacity in blocks when its command line states it (sim: --kv-blocks or the sim's
 * default; vLLM: --num-gpu-blocks-override), so the KV index can be sized up front. Otherwise
 * undefined: the index grows as events arrive.
 */
export function kvCapacityHint(p: Pick<EnginePlan, "kind" | "spec">): number | undefined {
  const argv = p.spec?.argv;
  if (!argv) return undefined;
  try {
    if (p.kind === "sim") {
      const at = argv.indexOf("sim-engine");
      return at < 0 ? undefined : parseSimArgs(argv.slice(at + 1))?.kvBlocks;
    }
    for (let i = argv.length - 1; i >= 0; i--) {
      const a = argv[i]!;
      const raw = a.startsWith("--num-gpu-blocks-override=") ? a.slice(a.indexOf("=") + 1) : a === "--num-gpu-blocks-override" ? argv[i + 1] : undefined;
      const n = raw === undefined ? NaN : Number(raw);
      if (Number.isInteger(n) && n > 0) return n;
    }
  } catch {
    // An argv the sim would reject: the engine will fail to start anyway; no hint.
  }
  return undefined;
}
