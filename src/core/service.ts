// Long-lived parts of a node (listener, supervisor, KV ingest, scraper, tier, cluster, planner)
// start and stop through one small interface, after Caddy's module lifecycle (caddy modules.go:
// Provision → use → Cleanup, where Cleanup must work even if Provision failed).
//
//   const group = new ServiceGroup([listener, supervisor, kvIngest], log);
//   await group.start();   // in order; a failure stops the started ones in reverse, then rethrows
//   …
//   await group.stop();    // reverse order; every stop runs even when an earlier one throws
//
// Contract for implementations: `stop()` is idempotent and safe after a failed or partial `start()`;
// `start()` resolves once the service does its job (a listener is bound, engines are spawned).
import { errorMessage } from "./errors.ts";
import type { Logger } from "./log.ts";

export interface Service {
  /** Short stable name for logs and errors (`listener`, `supervisor`, `kv-ingest`). */
  readonly name: string;
  start(): void | Promise<void>;
  stop(): void | Promise<void>;
}

/** A service from two closures: for small parts that are not classes of their own. */
export function service(name: string, start: () => void | Promise<void>, stop: () => void | Promise<void>): Service {
  return { name, start, stop };
}

export class ServiceStartError extends Error {
  constructor(
    readonly service: string,
    override readonly cause: unknown,
  ) {
    super(`${service}: ${errorMessage(cause)}`);
  }
}

/** An ordered list of services: started first to last, stopped last to first. */
export class ServiceGroup {
  private started: Service[] = [];
  private stopping: Promise<void> | null = null;

  constructor(
    readonly services: readonly Service[],
    private readonly log?: Logger,
  ) {}

  /** Names of the services that are running (started and not yet stopped), in start order. */
  get running(): string[] {
    return this.started.map((s) => s.name);
  }

  /** Start every service in order. On a failure, stop the ones already started (reverse) and throw. */
  async start(): Promise<void> {
    for (const s of this.services) {
      try {
        await s.start();
      } catch (e) {
        this.log?.error("service failed to start", { service: s.name, err: errorMessage(e) });
        // The failed one may have half-started: its stop() is safe by contract, so it runs too.
        this.started.push(s);
        await this.stop();
        throw e instanceof ServiceStartError ? e : new ServiceStartError(s.name, e);
      }
      this.started.push(s);
    }
  }

  /** Stop every started service in reverse order; idempotent; a throwing stop is logged and skipped. */
  stop(): Promise<void> {
    if (!this.stopping) {
      this.stopping = (async () => {
        while (this.started.length > 0) {
          const s = this.started.pop()!;
          try {
            await s.stop();
          } catch (e) {
            this.log?.error("service failed to stop", { service: s.name, err: errorMessage(e) });
          }
        }
      })().finally(() => (this.stopping = null));
    }
    return this.stopping;
  }
}
