// The worker registry: the one place that knows which engine endpoints exist, their state and their
// live load. Producers push into it (supervisor → upsert/remove on state changes, scraper →
// updateLoad, router → addInFlight); readers (router, admin, metrics) read it synchronously.
//
// Ownership of fields, so producers do not fight:
// - identity and lifecycle (node, model, role, kind, url, state, restarts): whoever upserts.
// - load.in_flight: the router's lease accounting only (`addInFlight`). An upsert of a known worker
//   never touches load, so a supervisor pushing a state change cannot reset in-flight counts.
// - load.running/waiting/kv_usage/scraped_at_ms: the metrics scraper (`updateLoad`).
// In-flight counts outlive `remove`: a lease released after its worker left (or after the worker
// came back under the same id) still balances to zero.
// Cordons (an operator's drain through /admin) live here too, as an overlay on what producers push:
// a cordoned worker that a producer reports `ready` is stored as `draining`, so a health flip or an
// engine restart cannot silently put it back into rotation; `cordon(id, false)` restores the
// producer's state. This is the one place operator drain state is kept.
import type { Logger } from "../core/log.ts";
import { errorMessage } from "../core/errors.ts";
import type { Role } from "../config/types.ts";
import { emptyLoad, type Worker, type WorkerLoad } from "./worker.ts";

export type RegistryChange =
  | { type: "added"; worker: Readonly<Worker> }
  | { type: "updated"; worker: Readonly<Worker>; previous: Readonly<Worker> }
  | { type: "removed"; worker: Readonly<Worker> }
  /** Load changed (in-flight booking or a scrape); fired often, listeners must be cheap. */
  | { type: "load"; worker: Readonly<Worker> };

export type RegistryListener = (change: RegistryChange) => void;

/** Fields a load update may set; in_flight goes through addInFlight only. */
export type ScrapedLoad = Partial<Omit<WorkerLoad, "in_flight">>;

export class WorkerRegistry {
  private readonly workers = new Map<string, Worker>();
  /** Router-booked in-flight per worker id; survives remove() until it drains to zero. */
  private readonly inFlight = new Map<string, number>();
  private readonly listeners = new Set<RegistryListener>();
  /** The listeners as an array, rebuilt on (un)subscribe: emit runs twice per request (in-flight) and walks it without a Set iterator. */
  private listenerList: readonly RegistryListener[] = [];
  /** Operator-drained worker ids (kept across remove/re-add), with the producer's last reported state. */
  private readonly cordons = new Map<string, Worker["state"] | null>();

  constructor(private readonly log?: Logger) {}

  /**
   * Add a worker or update a known one (matched by id). The registry keeps its own copy. For a known
   * worker the stored load is kept (see ownership above); for a new one, load starts from the given
   * scraped figures and the in-flight count still outstanding under that id.
   */
  upsert(worker: Worker): void {
    if (this.cordons.has(worker.id)) {
      this.cordons.set(worker.id, worker.state);
      if (worker.state === "ready") worker = { ...worker, state: "draining" };
    }
    this.store(worker);
  }

  private store(worker: Worker): void {
    const prev = this.workers.get(worker.id);
    const load: WorkerLoad = prev ? { ...prev.load } : { ...emptyLoad(), ...worker.load };
    load.in_flight = this.inFlight.get(worker.id) ?? 0;
    const next: Worker = { ...worker, load };
    this.workers.set(worker.id, next);
    if (!prev) this.emit({ type: "added", worker: next });
    else if (!sameIdentity(prev, next)) this.emit({ type: "updated", worker: next, previous: prev });
  }

  /** Set only the lifecycle state of a known worker; returns false when the id is unknown. */
  setState(id: string, state: Worker["state"]): boolean {
    const w = this.workers.get(id);
    if (!w) return false;
    if (w.state !== state || this.cordons.has(id)) this.upsert({ ...w, state });
    return true;
  }

  /**
   * Take a worker out of rotation (`on`) or put it back, whatever its producer reports meanwhile.
   * Returns false when the id is unknown.
   */
  cordon(id: string, on: boolean): boolean {
    const w = this.workers.get(id);
    if (!w) return false;
    if (on) {
      if (!this.cordons.has(id)) this.cordons.set(id, w.state);
      if (w.state === "ready") this.store({ ...w, state: "draining" });
    } else if (this.cordons.has(id)) {
      const reported = this.cordons.get(id) ?? w.state;
      this.cordons.delete(id);
      if (reported !== w.state) this.store({ ...w, state: reported });
    }
    return true;
  }

  isCordoned(id: string): boolean {
    return this.cordons.has(id);
  }

  remove(id: string): boolean {
    const w = this.workers.get(id);
    if (!w) return false;
    this.workers.delete(id);
    if ((this.inFlight.get(id) ?? 0) === 0) this.inFlight.delete(id);
    this.emit({ type: "removed", worker: w });
    return true;
  }

  get(id: string): Readonly<Worker> | undefined {
    return this.workers.get(id);
  }

  /** All workers, in insertion order. The objects are the registry's own: read, never mutate. */
  list(): readonly Readonly<Worker>[] {
    return [...this.workers.values()];
  }

  /** Workers of a model in any state (the router's 404-vs-503 distinction needs this). */
  ofModel(model: string): Readonly<Worker>[] {
    const out: Worker[] = [];
    for (const w of this.workers.values()) if (w.model === model) out.push(w);
    return out;
  }

  /** Ready workers serving `model` (and `role`, when given): the set a request may go to. */
  eligible(model: string, role?: Role): Readonly<Worker>[] {
    const out: Worker[] = [];
    for (const w of this.workers.values()) {
      if (w.state === "ready" && w.model === model && (role === undefined || w.role === role)) out.push(w);
    }
    return out;
  }

  /** Distinct model names served by any known worker, sorted. */
  models(): string[] {
    return [...new Set([...this.workers.values()].map((w) => w.model))].sort();
  }

  /** Scraped engine figures (running, waiting, kv_usage, scraped_at_ms). Unknown ids are ignored. */
  updateLoad(id: string, patch: ScrapedLoad): void {
    const w = this.workers.get(id);
    if (!w) return;
    const { in_flight: _ignored, in_flight_at_scrape: _stamped, ...rest } = patch as Partial<WorkerLoad>;
    Object.assign(w.load, rest);
    // Stamp herd's own count at the moment of the scrape, so the engine's figures can later be
    // split into herd's requests and outside traffic (router/load.ts).
    if ("running" in rest || "waiting" in rest)
      w.load.in_flight_at_scrape = w.load.running === null && w.load.waiting === null ? null : (this.inFlight.get(id) ?? 0);
    this.emit({ type: "load", worker: w });
  }

  /** Router lease accounting: add delta (±1) to the in-flight count; never below zero. */
  addInFlight(id: string, delta: number): number {
    const n = Math.max(0, (this.inFlight.get(id) ?? 0) + delta);
    const w = this.workers.get(id);
    if (n === 0 && !w) this.inFlight.delete(id);
    else this.inFlight.set(id, n);
    if (w) {
      w.load.in_flight = n;
      this.emit({ type: "load", worker: w });
    }
    return n;
  }

  /** In-flight count for an id, including a removed worker's still-open leases. */
  inFlightOf(id: string): number {
    return this.inFlight.get(id) ?? 0;
  }

  /** Subscribe to changes; returns the unsubscribe function. A throwing listener is logged, not fatal. */
  onChange(listener: RegistryListener): () => void {
    this.listeners.add(listener);
    this.listenerList = [...this.listeners];
    return () => {
      this.listeners.delete(listener);
      this.listenerList = [...this.listeners];
    };
  }

  get size(): number {
    return this.workers.size;
  }

  private emit(change: RegistryChange): void {
    const list = this.listenerList;
    for (let i = 0; i < list.length; i++) {
      const l = list[i]!;
      if (list !== this.listenerList && !this.listeners.has(l)) continue; // unsubscribed by an earlier listener of this change
      try {
        l(change);
      } catch (e) {
        this.log?.error("registry listener threw", { change: change.type, worker: change.worker.id, err: errorMessage(e) });
      }
    }
  }
}

function sameIdentity(a: Worker, b: Worker): boolean {
  return (
    a.node === b.node &&
    a.model === b.model &&
    a.role === b.role &&
    a.kind === b.kind &&
    a.url === b.url &&
    a.state === b.state &&
    a.restarts === b.restarts
  );
}
