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
// comes within 500 ms of the first, which is the same Ctrl-C delivered twice (src/ops/signals.ts).
// SIGHUP reloads the config file: live keys apply at once, the rest are named as needing a restart
// and kept (src/ops/reload.ts).
import { RealClock, type Clock } from "./core/clock.ts";
import { errorMessage } from "./core/errors.ts";
import { createLogger, type Logger } from "./core/log.ts";
import type { Config } from "./config/types.ts";
import { WorkerRegistry } from "./cluster/registry.ts";
import type { Worker } from "./cluster/workers.ts";
import { Supervisor } from "./engine/supervisor.ts";
import { HerdMetrics } from "./metrics/herd-metrics.ts";
import { MetricsScraper, Router } from "./router/index.ts";
import { Frontend } from "./frontend/app.ts";
import { bodyBackstopBytes, listen, parseListen, type Listening } from "./frontend/server.ts";
import type { AdminBackend } from "./admin/routes.ts";
import { kvAdminBackend } from "./admin/kv-explain.ts";
import { KvConsumer } from "./kv/consumer.ts";
import { SharedPreprocessor, policyNeedsPrompt } from "./frontend/prompts.ts";
import type { Overrides } from "./config/load.ts";
import { renderFindings } from "./config/findings.ts";
import { reloadFromFile } from "./ops/reload.ts";
import { StopSignals } from "./ops/signals.ts";
import { exposureWarnings } from "./ops/exposure.ts";

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
  // What runs now: `config` plus the live keys of every SIGHUP reload since (src/ops/reload.ts).
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
  const admin: AdminBackend = {
    ...kvAdminBackend(config, kv, prompts),
    logs: (id, lines) => (known(id) ? supervisor.logs(id).slice(-lines) : null),
    pid: (id) => supervisor.status().find((s) => s.worker.id === id)?.pid ?? null,
    drain: (id) => {
      const w = known(id);
      if (!w) return false;
      adminDrained.add(id);
      publish(w);
      log.info("worker drained by admin", { worker: id });
      return true;
    },
    undrain: (id) => {
      const w = known(id);
      if (!w) return false;
      adminDrained.delete(id);
      publish(w);
      log.info("worker undrained by admin", { worker: id });
      return true;
    },
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

  // A stop signal while engines are being spawned is remembered and acted on once startup is done,
  // so no engine is left behind by a herd that died half-started.
  // SIGHUP too: its default action would kill herd mid-startup and orphan the engines just spawned.
  let earlySignal: string | null = null;
  let earlyHup = false;
  const early = { term: () => void (earlySignal = "SIGTERM"), int: () => void (earlySignal = "SIGINT"), hup: () => void (earlyHup = true) };
  if (opts.signals) {
    process.on("SIGTERM", early.term);
    process.on("SIGINT", early.int);
    process.on("SIGHUP", early.hup);
  }
  const dropEarly = () => {
    process.off("SIGTERM", early.term);
    process.off("SIGINT", early.int);
    process.off("SIGHUP", early.hup);
  };
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
    dropEarly();
    await promptsReady;
    prompts.close();
    await listening.stop(true);
    frontend.close();
    throw e;
  }
  const promptsFailed = await promptsReady;
  if (promptsFailed !== null) {
    dropEarly();
    await supervisor.stop({ drainMs: 0 });
    prompts.close();
    await listening.stop(true);
    frontend.close();
    throw new Error(`router.policy ${router.policy.name} needs each model's tokenizer, which cannot be loaded: ${errorMessage(promptsFailed)}`);
  }
  for (const w of supervisor.list()) publish(w);
  for (const line of exposureWarnings(config, supervisor.plans())) log.warn(line);
  // KV events: every worker with endpoints (generated for local engines, from config for external
  // ones); the supervisor's state changes take failed/stopped/restarted engines out of the index.
  for (const p of supervisor.plans()) {
    if (!p.kvEvents) continue;
    const blockSize = config.models.find((m) => m.name === p.model)?.block_size ?? 16;
    kv.add({ id: p.id, model: p.model, blockSize, endpoint: p.kvEvents.endpoint, replayEndpoint: p.kvEvents.replayEndpoint, topic: p.kvEvents.topic });
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
      removeSignals();
      log.info("herd stopped");
      resolveDone(0);
      return 0;
    })().catch((e) => {
      log.error("shutdown failed", { err: errorMessage(e) });
      removeSignals();
      resolveDone(1);
      return 1;
    });
    return shuttingDown;
  };

  const stops = new StopSignals();
  const onStop = (sig: string) => () => {
    const verdict = stops.receive(performance.now());
    if (verdict === "duplicate") {
      const ms = Math.round(stops.sinceFirstMs(performance.now()));
      log.info(`received ${sig} again ${ms} ms after the first: the same stop request delivered twice (e.g. by a wrapper forwarding Ctrl-C); still draining`);
      return;
    }
    log.info(`received ${sig}${verdict === "force" ? " again: stopping without waiting for open requests" : ""}`);
    void shutdown(verdict === "force");
  };
  const onTerm = onStop("SIGTERM");
  const onInt = onStop("SIGINT");
  // SIGHUP: one reload at a time; signals during a reload fold into one more pass after it.
  let reloading: Promise<void> | null = null;
  let reloadAgain = false;
  const reloadOnce = async (path: string) => {
    log.info("received SIGHUP: reloading the config", { file: path });
    const r = await reloadFromFile(path, opts.overrides ?? {}, running, { maxBodyBytesLive: bodyBackstopBytes(config.frontend.max_body_bytes) });
    if (!r.ok) {
      const errors = r.findings.filter((f) => f.severity === "error").length;
      for (const line of renderFindings(r.findings, r.file).split("\n")) if (line) log.error(line);
      log.error(`config reload failed: ${errors} error${errors === 1 ? "" : "s"} in ${r.file}; still running the previous config`);
      return;
    }
    for (const line of renderFindings(r.findings, path).split("\n")) if (line) log.warn(line);
    if (r.live.length === 0 && r.restart.length === 0) {
      log.info("config reloaded: no changes");
      return;
    }
    running = r.config;
    frontend.applyConfig(r.config);
    if (r.live.length) log.info(`config reloaded: applied ${r.live.join(", ")}`);
    if (r.restart.length) log.warn(`config reload: restart required to apply ${r.restart.join(", ")} (running with the previous values)`);
  };
  const onHup = () => {
    const path = opts.configPath;
    if (path === null) return log.warn("received SIGHUP: herd runs the embedded default config; there is no file to reload");
    if (shuttingDown) return log.info("received SIGHUP while stopping: ignored");
    if (reloading) return void (reloadAgain = true);
    reloading = (async () => {
      do {
        reloadAgain = false;
        await reloadOnce(path).catch((e) => log.error("config reload failed", { err: errorMessage(e) }));
      } while (reloadAgain);
    })().finally(() => (reloading = null));
  };
  // Never crash the daemon on a stray async error: log it loudly and keep serving.
  const onRejection = (e: unknown) => log.error("unhandled promise rejection (bug)", { err: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  const onException = (e: Error) => log.error("uncaught exception (bug)", { err: e.stack ?? e.message });
  const removeSignals = () => {
    process.off("SIGTERM", onTerm);
    process.off("SIGINT", onInt);
    process.off("SIGHUP", onHup);
    process.off("unhandledRejection", onRejection);
    process.off("uncaughtException", onException);
  };
  if (opts.signals) {
    process.on("SIGTERM", onTerm);
    process.on("SIGINT", onInt);
    process.on("SIGHUP", onHup);
    process.on("unhandledRejection", onRejection);
    process.on("uncaughtException", onException);
    dropEarly();
    if (earlySignal) {
      log.info(`received ${earlySignal} during startup`);
      void shutdown();
    } else if (earlyHup) {
      log.info("received SIGHUP during startup");
      onHup();
    }
  }

  return { url: listening.url, registry, router, supervisor, kv, prompts, frontend, metrics, firstReady, shutdown, done };
}

/**
 * sd_notify through `systemd-notify` (a child process, so the unit needs NotifyAccess=all, which
 * systemd/herd.service sets). NOTIFY_SOCKET is taken out of herd's environment so that engines,
 * which inherit it, cannot speak for the unit.
 */
function systemdNotifier(log: Logger): { enabled: boolean; send(vars: string[]): void } {
  const socket = process.env.NOTIFY_SOCKET;
  if (!socket) return { enabled: false, send: () => {} };
  delete process.env.NOTIFY_SOCKET;
  let warned = false;
  return {
    enabled: true,
    send(vars) {
      try {
        const p = Bun.spawn(["systemd-notify", ...vars], { env: { ...process.env, NOTIFY_SOCKET: socket }, stdout: "ignore", stderr: "pipe" });
        void p.exited.then(async (code) => {
          if (code !== 0 && !warned) {
            warned = true;
            log.warn("systemd-notify failed", { code, stderr: (await new Response(p.stderr).text()).trim() });
          }
        });
      } catch (e) {
        if (!warned) log.warn("cannot run systemd-notify", { err: errorMessage(e) });
        warned = true;
      }
    },
  };
}
