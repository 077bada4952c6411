// Who is talking to which worker right now, so a worker that leaves rotation abruptly (crashed,
// restarted, failed health probes: a SIGSTOPped engine keeps its sockets open and would otherwise
// hang every request on it) has its requests aborted at once instead of waiting for timeouts.
import type { WorkerRegistry } from "../workers/registry.ts";

/** Why an upstream request was aborted; carried as the AbortSignal reason. */
export class AbortCause {
  constructor(
    readonly kind: "client" | "first_token_timeout" | "idle_timeout" | "worker_down" | "shutdown",
    readonly message: string,
  ) {}
}

export class InFlightTracker {
  private readonly byWorker = new Map<string, Set<AbortController>>();

  add(workerId: string, ac: AbortController): void {
    let set = this.byWorker.get(workerId);
    if (!set) this.byWorker.set(workerId, (set = new Set()));
    set.add(ac);
  }

  delete(workerId: string, ac: AbortController): void {
    const set = this.byWorker.get(workerId);
    if (!set) return;
    set.delete(ac);
    if (set.size === 0) this.byWorker.delete(workerId);
  }

  abortWorker(workerId: string, cause: AbortCause): number {
    const set = this.byWorker.get(workerId);
    if (!set) return 0;
    const n = set.size;
    for (const ac of [...set]) ac.abort(cause);
    return n;
  }

  abortAll(cause: AbortCause): void {
    for (const id of [...this.byWorker.keys()]) this.abortWorker(id, cause);
  }

  /**
   * Abort requests on workers that go from serving to failed/stopped/starting (a restart) or leave
   * the registry. `draining` is deliberately not here: a drain lets admitted requests finish.
   */
  watch(registry: WorkerRegistry): () => void {
    return registry.onChange((ch) => {
      if (ch.type === "removed") {
        this.abortWorker(ch.worker.id, new AbortCause("worker_down", `worker ${ch.worker.id} was removed`));
      } else if (ch.type === "updated") {
        const was = ch.previous.state;
        const now = ch.worker.state;
        const serving = (s: string) => s === "ready" || s === "draining";
        if (serving(was) && !serving(now))
          this.abortWorker(ch.worker.id, new AbortCause("worker_down", `worker ${ch.worker.id} went ${now}`));
      }
    });
  }

  get size(): number {
    let n = 0;
    for (const s of this.byWorker.values()) n += s.size;
    return n;
  }
}
