// How `herd run` answers process signals, apart from the wiring in daemon.ts: these handlers live
// across two phases (buffering during startup, acting after it) and carry their own small state
// machines (double Ctrl-C, reloads folded while one runs), which read better on their own.
//   SIGTERM/SIGINT: drain and stop; a second one skips the wait — unless it comes within 500 ms of
//   the first, the same Ctrl-C delivered twice (src/daemon/stop-signals.ts).
//   SIGHUP: reload the config file (src/daemon/reload.ts); one reload at a time.
//   During startup all three are remembered and acted on once startup is done, so no engine is
//   left behind by a herd that died half-started (SIGHUP's default action would kill it too).
import { errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { Config } from "../config/types.ts";
import type { Overrides } from "../config/load.ts";
import { renderFindings } from "../config/findings.ts";
import { reloadFromFile } from "./reload.ts";
import { StopSignals } from "./stop-signals.ts";

export interface SignalActions {
  /** Begin the shutdown (force: skip the drain wait, or cut a running one short). */
  stop(force: boolean): void;
  /** True once the shutdown has begun (a SIGHUP then is ignored). */
  stopping(): boolean;
  /** Reload the config file; null when herd runs the embedded default (nothing to reload). */
  reload: (() => Promise<void>) | null;
}

export class DaemonSignals {
  private earlySignal: string | null = null;
  private earlyHup = false;
  private readonly early = {
    term: () => void (this.earlySignal = "SIGTERM"),
    int: () => void (this.earlySignal = "SIGINT"),
    hup: () => void (this.earlyHup = true),
  };
  private readonly stops = new StopSignals();
  private actions: SignalActions | null = null;
  private reloading: Promise<void> | null = null;
  private reloadAgain = false;
  private readonly onTerm = () => this.onStop("SIGTERM");
  private readonly onInt = () => this.onStop("SIGINT");
  private readonly onHup = () => this.hup();
  // Never crash the daemon on a stray async error: log it loudly and keep serving.
  private readonly onRejection = (e: unknown) => this.log.error("unhandled promise rejection (bug)", { err: e instanceof Error ? (e.stack ?? e.message) : String(e) });
  private readonly onException = (e: Error) => this.log.error("uncaught exception (bug)", { err: e.stack ?? e.message });

  /** `enabled` false (in-process tests, benches): no handler is ever installed. Buffering starts now. */
  constructor(
    private readonly log: Logger,
    private readonly enabled: boolean,
  ) {
    if (!enabled) return;
    process.on("SIGTERM", this.early.term);
    process.on("SIGINT", this.early.int);
    process.on("SIGHUP", this.early.hup);
  }

  /** Stop buffering (startup failed, or the real handlers take over). */
  dropEarly(): void {
    process.off("SIGTERM", this.early.term);
    process.off("SIGINT", this.early.int);
    process.off("SIGHUP", this.early.hup);
  }

  /** Startup is done: install the real handlers, then act on a signal that came during startup. */
  install(actions: SignalActions): void {
    this.actions = actions;
    if (!this.enabled) return;
    process.on("SIGTERM", this.onTerm);
    process.on("SIGINT", this.onInt);
    process.on("SIGHUP", this.onHup);
    process.on("unhandledRejection", this.onRejection);
    process.on("uncaughtException", this.onException);
    this.dropEarly();
    if (this.earlySignal) {
      this.log.info(`received ${this.earlySignal} during startup`);
      actions.stop(false);
    } else if (this.earlyHup) {
      this.log.info("received SIGHUP during startup");
      this.hup();
    }
  }

  remove(): void {
    process.off("SIGTERM", this.onTerm);
    process.off("SIGINT", this.onInt);
    process.off("SIGHUP", this.onHup);
    process.off("unhandledRejection", this.onRejection);
    process.off("uncaughtException", this.onException);
  }

  private onStop(sig: string): void {
    const verdict = this.stops.receive(performance.now());
    if (verdict === "duplicate") {
      const ms = Math.round(this.stops.sinceFirstMs(performance.now()));
      this.log.info(`received ${sig} again ${ms} ms after the first: the same stop request delivered twice (e.g. by a wrapper forwarding Ctrl-C); still draining`);
      return;
    }
    this.log.info(`received ${sig}${verdict === "force" ? " again: stopping without waiting for open requests" : ""}`);
    this.actions?.stop(verdict === "force");
  }

  // One reload at a time; signals during a reload fold into one more pass after it.
  private hup(): void {
    const a = this.actions;
    if (!a) return;
    const reload = a.reload;
    if (reload === null) return this.log.warn("received SIGHUP: herd runs the embedded default config; there is no file to reload");
    if (a.stopping()) return this.log.info("received SIGHUP while stopping: ignored");
    if (this.reloading) return void (this.reloadAgain = true);
    this.reloading = (async () => {
      do {
        this.reloadAgain = false;
        await reload().catch((e) => this.log.error("config reload failed", { err: errorMessage(e) }));
      } while (this.reloadAgain);
    })().finally(() => (this.reloading = null));
  }
}

/**
 * One SIGHUP reload of `path`: validate, log the findings, and hand a changed config to `apply`
 * (which makes it the running one). An invalid file changes nothing.
 */
export async function reloadConfig(
  path: string,
  o: { overrides: Overrides; running: Config; maxBodyBytesLive: number; log: Logger; apply(config: Config): void | Promise<void> },
): Promise<void> {
  const { log } = o;
  log.info("received SIGHUP: reloading the config", { file: path });
  const r = await reloadFromFile(path, o.overrides, o.running, { maxBodyBytesLive: o.maxBodyBytesLive });
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
  await o.apply(r.config);
  if (r.live.length) log.info(`config reloaded: applied ${r.live.join(", ")}`);
  if (r.restart.length) log.warn(`config reload: restart required to apply ${r.restart.join(", ")} (running with the previous values)`);
}
