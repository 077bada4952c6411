// Readiness as a service: "herd ready" is logged, and systemd gets READY=1, when the listener is up
// and the first worker is ready; STATUS follows worker changes; while engines are still loading,
// systemd's start timeout is extended (model loading can outlast TimeoutStartSec). When no engine is
// left starting and none is ready, herd itself is up (answering 503s) and says so.
import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import type { Service } from "../core/service.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { Notifier } from "./notify.ts";

/** How often the start timeout is extended while engines load. */
export const EXTEND_EVERY_MS = 20_000;

export class Readiness implements Service {
  readonly name = "readiness";
  /** Resolves when at least one worker is ready. */
  readonly firstReady: Promise<void>;
  private resolveReady: () => void = () => {};
  private ready = false;
  private readySent = false;
  private unwatch: (() => void) | null = null;
  private extendTimer: TimerHandle | null = null;

  constructor(
    private readonly o: {
      registry: WorkerRegistry;
      notify: Notifier;
      clock: Clock;
      log: Logger;
      url: () => string;
      /** Ready without a worker: the planner scales every pool from zero and holds requests meanwhile. */
      readyWithoutWorkers?: boolean;
    },
  ) {
    this.firstReady = new Promise<void>((r) => (this.resolveReady = r));
  }

  start(): void {
    const { registry, notify } = this.o;
    this.unwatch = registry.onChange((c) => {
      if (c.type === "load") return;
      this.check();
      if (this.ready && c.type === "updated") notify.send([`STATUS=serving on ${this.o.url()}, workers ${this.summary()}`]);
    });
    this.check();
    if (notify.enabled) this.armExtend();
  }

  stop(): void {
    this.unwatch?.();
    this.unwatch = null;
    this.extendTimer?.cancel();
    this.extendTimer = null;
  }

  private summary(): string {
    const ws = this.o.registry.list();
    return `${ws.filter((w) => w.state === "ready").length}/${ws.length} ready`;
  }

  private check(): void {
    const { registry, notify, log } = this.o;
    if (this.ready || (!this.o.readyWithoutWorkers && !registry.list().some((w) => w.state === "ready"))) return;
    this.ready = true;
    this.readySent = true;
    const models = [...new Set(registry.list().map((w) => w.model))].join(",");
    log.info(`herd ready: listening on ${this.o.url()} workers ${this.summary()} models ${models}`);
    notify.send(["READY=1", `STATUS=serving on ${this.o.url()}, workers ${this.summary()}`]);
    this.resolveReady();
  }

  private armExtend(): void {
    this.extendTimer = this.o.clock.setTimer(EXTEND_EVERY_MS, () => {
      this.extendTimer = null;
      if (this.readySent || this.unwatch === null) return;
      const starting = this.o.registry.list().some((w) => w.state === "starting");
      this.o.notify.send(starting ? ["EXTEND_TIMEOUT_USEC=60000000", `STATUS=waiting for engines: ${this.summary()}`] : ["READY=1", "STATUS=no worker could start; serving 503s"]);
      if (!starting) this.readySent = true;
      else this.armExtend();
    });
  }
}
