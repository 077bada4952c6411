// herd's own queue in front of a saturated model: when the requests herd has in flight for a model
// reach its capacity (`frontend.queue.worker_slots` × its ready workers), the next one waits here
// instead of piling onto engines whose own queues know nothing of tenants. Bounded (max_waiting),
// with a deadline (timeout_ms → 503 + Retry-After), and released in this order:
//   1. priority class, highest first, where waiting `aging_ms` raises a request by one class, up to
//      the highest class waiting (never above it), so a low class under a flood of high ones is
//      served eventually (never starved) while equal classes stay ordered by fair share alone;
//   2. within a class, the tenant with the least service so far: virtual token counters (VTC,
//      Sheng et al., "Fairness in Serving Large Language Models", OSDI 2024): each grant adds the
//      request's tokens (prompt + max_tokens) to its tenant's counter, and a tenant that starts
//      waiting again is lifted to the smallest counter among those waiting, so idle time is not
//      banked into a burst later;
//   3. then arrival order.
// `headroom_slots` per worker are held back for tenants under their fair share (their slots <
// capacity / tenants active on the model in the last SHARE_WINDOW_MS): a tenant over it queues once
// the model is that close to full, so a light tenant's request passes at once instead of waiting
// for the next free slot. A tenant alone on the model is never over its share: it uses every slot.
// worker_slots 0 (the default) turns it off: every request passes at once, uncounted.
import type { Clock, TimerHandle } from "../core/clock.ts";
import { unavailable } from "../core/errors.ts";
import type { QueueConfig } from "../config/types.ts";
import { ClientGone } from "../request/gate.ts";

/** A tenant seen on a model (a slot taken, released, or a wait) this recently counts in the fair share. */
export const SHARE_WINDOW_MS = 10_000;

interface Entry {
  model: string;
  tenant: string;
  priority: number;
  cost: number;
  atMs: number;
  seq: number;
  grant: (release: () => void) => void;
  fail: (e: unknown) => void;
  timer: TimerHandle;
  unlisten: () => void;
}

/** What a grant reports (for the queue-wait metric). */
export interface Granted {
  release: () => void;
  waitedMs: number;
}

/** The queue is off (worker_slots 0): one shared grant, not a closure and an object per request. */
const GRANTED_UNQUEUED: Granted = Object.freeze({ release: () => {}, waitedMs: 0 });

export class FairQueue {
  private readonly inUse = new Map<string, number>();
  /** Slots held per model and tenant (`${model}\0${tenant}`), for fair shares. */
  private readonly inUseBy = new Map<string, number>();
  /** When each tenant was last seen on each model (same keys): the tenants sharing it lately. */
  private readonly seenAt = new Map<string, number>();
  private readonly waiting: Entry[] = [];
  private readonly vtc = new Map<string, number>();
  private seq = 0;

  constructor(
    private readonly clock: Clock,
    private readonly config: () => QueueConfig,
    /** Ready workers of a model (its capacity is this × worker_slots). */
    private readonly readyWorkers: (model: string) => number,
  ) {}

  /** Requests waiting (all models). */
  get size(): number {
    return this.waiting.length;
  }

  /** The virtual token counter of a tenant (tests, explain). */
  counter(tenant: string): number {
    return this.vtc.get(tenant) ?? 0;
  }

  private capacity(model: string): number {
    return this.readyWorkers(model) * this.config().worker_slots;
  }

  /**
   * Resolves when the request may be routed, with the release to call when it is over; rejects
   * with a 503 HerdError (queue full, deadline) or ClientGone (the client left while waiting).
   */
  acquire(model: string, tenant: string, priority: number, cost: number, signal: AbortSignal | null): Promise<Granted> {
    const cfg = this.config();
    const start = this.clock.now();
    if (cfg.worker_slots === 0) return Promise.resolve(GRANTED_UNQUEUED);
    this.seenAt.set(`${model}\0${tenant}`, start);
    const fits = this.fits(model, tenant);
    if (fits && !this.waiting.some((e) => e.model === model && this.fits(model, e.tenant))) {
      return Promise.resolve({ release: this.take(model, tenant, cost), waitedMs: 0 });
    }
    if (this.waiting.length >= cfg.max_waiting) return Promise.reject(unavailable(`every worker of ${model} is busy and herd's queue is full (${cfg.max_waiting})`, "queue_full", 1));
    if (signal?.aborted) return Promise.reject(new ClientGone());
    this.lift(model, tenant);
    return new Promise<Granted>((resolve, reject) => {
      const e: Entry = {
        model, tenant, priority, cost, atMs: start, seq: this.seq++,
        grant: (release) => resolve({ release, waitedMs: this.clock.now() - start }),
        fail: reject,
        timer: this.clock.setTimer(cfg.timeout_ms, () => this.drop(e, unavailable(`every worker of ${model} stayed busy for ${cfg.timeout_ms} ms`, "queue_timeout", 1))),
        unlisten: () => {},
      };
      if (signal) {
        const onAbort = () => this.drop(e, new ClientGone());
        signal.addEventListener("abort", onAbort, { once: true });
        e.unlisten = () => signal.removeEventListener("abort", onAbort);
      }
      this.waiting.push(e);
    });
  }

  /** Capacity may have grown (a worker became ready): release what fits. */
  poke(): void {
    // Called on every registry change, in-flight counts included (twice per request): nothing to do
    // when nobody waits.
    if (this.waiting.length === 0) return;
    for (const m of new Set(this.waiting.map((e) => e.model))) this.dispatch(m);
  }

  private held(model: string, tenant: string): number {
    return this.inUseBy.get(`${model}\0${tenant}`) ?? 0;
  }

  /**
   * A tenant is over its fair share of a model when it holds at least capacity / (tenants holding
   * slots of the model or waiting for it, itself included). Alone it is never over.
   */
  overShare(model: string, tenant: string): boolean {
    if (this.config().worker_slots === 0) return false; // the queue is off: no slots, no shares
    const active = new Set<string>([tenant]);
    const now = this.clock.now();
    for (const [k, at] of this.seenAt) {
      if (now - at > SHARE_WINDOW_MS && !this.inUseBy.has(k)) this.seenAt.delete(k);
      else if (k.startsWith(`${model}\0`)) active.add(k.slice(model.length + 1));
    }
    for (const e of this.waiting) if (e.model === model) active.add(e.tenant);
    return this.held(model, tenant) >= this.capacity(model) / active.size;
  }

  /** Whether one more request of `tenant` may take a slot of `model` now (the headroom is for those under their share). */
  private fits(model: string, tenant: string): boolean {
    const used = this.inUse.get(model) ?? 0;
    const cap = this.capacity(model);
    if (used >= cap) return false;
    const cfg = this.config();
    const headroom = Math.min(cfg.headroom_slots, cfg.worker_slots - 1) * this.readyWorkers(model);
    return headroom <= 0 || used < cap - headroom || !this.overShare(model, tenant);
  }

  /** VTC's counter lift: a tenant that starts waiting does not bring credit from its idle time. */
  private lift(model: string, tenant: string): void {
    let min = Infinity;
    for (const e of this.waiting) {
      if (e.model !== model) continue;
      if (e.tenant === tenant) return; // already waiting: no lift
      min = Math.min(min, this.counter(e.tenant));
    }
    if (min !== Infinity && this.counter(tenant) < min) this.vtc.set(tenant, min);
  }

  private take(model: string, tenant: string, cost: number): () => void {
    this.inUse.set(model, (this.inUse.get(model) ?? 0) + 1);
    const by = `${model}\0${tenant}`;
    this.inUseBy.set(by, (this.inUseBy.get(by) ?? 0) + 1);
    this.vtc.set(tenant, this.counter(tenant) + cost);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.inUse.set(model, (this.inUse.get(model) ?? 1) - 1);
      this.seenAt.set(by, this.clock.now());
      const left = (this.inUseBy.get(by) ?? 1) - 1;
      if (left > 0) this.inUseBy.set(by, left);
      else this.inUseBy.delete(by);
      this.dispatch(model);
    };
  }

  private effectivePriority(e: Entry, now: number, top: number): number {
    const aging = this.config().aging_ms;
    return aging > 0 ? Math.min(top, e.priority + Math.floor((now - e.atMs) / aging)) : e.priority;
  }

  /** The next entry of a model to release: priority (aged), then least counter, then arrival; only tenants that fit. */
  private best(model: string): number {
    const fit = new Map<string, boolean>();
    const fits = (t: string) => {
      let f = fit.get(t);
      if (f === undefined) fit.set(t, (f = this.fits(model, t)));
      return f;
    };
    const now = this.clock.now();
    let top = -Infinity;
    for (const e of this.waiting) if (e.model === model && e.priority > top) top = e.priority;
    let bi = -1;
    let bp = 0;
    let bc = 0;
    for (let i = 0; i < this.waiting.length; i++) {
      const e = this.waiting[i]!;
      if (e.model !== model || !fits(e.tenant)) continue;
      const p = this.effectivePriority(e, now, top);
      const c = this.counter(e.tenant);
      const b = this.waiting[bi];
      if (bi < 0 || p > bp || (p === bp && (c < bc || (c === bc && e.seq < b!.seq)))) {
        bi = i;
        bp = p;
        bc = c;
      }
    }
    return bi;
  }

  private dispatch(model: string): void {
    for (;;) {
      const i = this.best(model);
      if (i < 0) return;
      const e = this.waiting.splice(i, 1)[0]!;
      e.timer.cancel();
      e.unlisten();
      e.grant(this.take(model, e.tenant, e.cost));
    }
  }

  private drop(e: Entry, err: unknown): void {
    const i = this.waiting.indexOf(e);
    if (i < 0) return;
    this.waiting.splice(i, 1);
    e.timer.cancel();
    e.unlisten();
    e.fail(err);
  }
}
