// The hold queue: a request for a pool with no ready engine waits here (instead of an instant 503)
// while the planner starts or wakes one. Bounded by count and bytes, FIFO per pool, a deadline per
// request on the injected clock. The first request held for a pool pokes the planner (wake on
// request: no waiting for the next tick); `readyFor(pool)` releases the pool's requests in arrival
// order once an engine is ready, and they go through the normal router. Past the bounds (at once)
// or the deadline, the caller answers 503 with `Retry-After` from the predicted ready time (the
// planner's measured start and wake times), never a bare refusal.
import type { Clock, TimerHandle } from "../core/clock.ts";
import { HerdError } from "../core/errors.ts";

export type HoldOutcome = "release" | "timeout" | "aborted";
export type HoldRejection = "count" | "bytes" | "timeout" | "disabled";

export interface HoldQueueOptions {
  clock: Clock;
  /** Most requests held at once (all pools); 0 = holding is off (503 at once). */
  maxCount: number;
  /** Most body bytes held at once (all pools). */
  maxBytes: number;
  /** A request held this long is answered 503. */
  timeoutMs: number;
  /** Called when a pool goes from no held request to one: the planner runs a tick now. */
  poke?: (pool: string) => void;
  /** Milliseconds until the pool is predicted to have a ready engine; null = unknown. */
  predictReadyMs?: (pool: string) => number | null;
  /** Called for every refusal (bounds or deadline), for metrics. */
  onReject?: (pool: string, why: HoldRejection) => void;
  /** Called with each released request's wait, for metrics. */
  onRelease?: (pool: string, waitedMs: number) => void;
}

interface Held {
  pool: string;
  bytes: number;
  promptTokens: number;
  atMs: number;
  timer: TimerHandle;
  done: (o: HoldOutcome) => void;
}

export interface HeldSummary {
  requests: number;
  promptTokens: number;
  bytes: number;
  oldestWaitMs: number | null;
}

export class HoldQueue {
  private readonly pools = new Map<string, Held[]>();
  private count = 0;
  private bytes = 0;

  constructor(private readonly o: HoldQueueOptions) {}

  /**
   * Wait for `pool` to have a ready engine. Resolves "release" (route it now), "timeout" (answer
   * `unavailable(pool)`) or "aborted" (the client left). Rejects at once with the 503 when the
   * queue is full.
   */
  hold(pool: string, req: { bytes: number; promptTokens: number; signal?: AbortSignal }): Promise<HoldOutcome> {
    const { maxCount, maxBytes } = this.o;
    const why: HoldRejection | null = maxCount === 0 ? "disabled" : this.count + 1 > maxCount ? "count" : this.bytes + req.bytes > maxBytes ? "bytes" : null;
    if (why) {
      this.o.onReject?.(pool, why);
      return Promise.reject(this.unavailable(pool, why));
    }
    if (req.signal?.aborted) return Promise.resolve("aborted");
    return new Promise<HoldOutcome>((resolve) => {
      const queue = this.pools.get(pool) ?? [];
      const first = queue.length === 0;
      const onAbort = () => this.settle(h, "aborted");
      const h: Held = {
        pool, bytes: req.bytes, promptTokens: req.promptTokens, atMs: this.o.clock.now(),
        timer: this.o.clock.setTimer(this.o.timeoutMs, () => {
          this.o.onReject?.(pool, "timeout");
          this.settle(h, "timeout");
        }),
        done: (outcome) => {
          req.signal?.removeEventListener("abort", onAbort);
          resolve(outcome);
        },
      };
      req.signal?.addEventListener("abort", onAbort, { once: true });
      queue.push(h);
      this.pools.set(pool, queue);
      this.count++;
      this.bytes += req.bytes;
      if (first) this.o.poke?.(pool);
    });
  }

  /** An engine of `pool` is ready: release its held requests, oldest first. Returns how many. */
  readyFor(pool: string): number {
    const queue = this.pools.get(pool);
    if (!queue) return 0;
    const n = queue.length;
    for (const h of [...queue]) {
      this.o.onRelease?.(pool, this.o.clock.now() - h.atMs);
      this.settle(h, "release");
    }
    return n;
  }

  /** The 503 for a request of `pool` that cannot wait (or waited too long), with Retry-After. */
  unavailable(pool: string, why: HoldRejection = "timeout"): HerdError {
    const ms = this.o.predictReadyMs?.(pool) ?? null;
    const retryS = Math.max(1, Math.ceil((ms ?? this.o.timeoutMs) / 1000));
    const what =
      why === "timeout" ? `no engine of ${pool} became ready within ${this.o.timeoutMs} ms`
      : why === "disabled" ? `no engine of ${pool} is ready`
      : `no engine of ${pool} is ready and the hold queue is full (planner.hold_max${why === "bytes" ? "_bytes" : ""})`;
    return new HerdError(503, "service_unavailable", `${what}; one is starting, retry in ${retryS} s`, "no_ready_engine", null, { "Retry-After": String(retryS) });
  }

  /** Held requests of one pool (what the planner counts as demand). */
  summary(pool: string): HeldSummary {
    const queue = this.pools.get(pool) ?? [];
    let promptTokens = 0;
    let bytes = 0;
    for (const h of queue) {
      promptTokens += h.promptTokens;
      bytes += h.bytes;
    }
    return { requests: queue.length, promptTokens, bytes, oldestWaitMs: queue.length ? this.o.clock.now() - queue[0]!.atMs : null };
  }

  /** Pools with held requests. */
  heldPools(): string[] {
    return [...this.pools.keys()];
  }

  get size(): { count: number; bytes: number } {
    return { count: this.count, bytes: this.bytes };
  }

  /** Answer every held request "timeout" (shutdown). */
  close(): void {
    for (const queue of [...this.pools.values()]) for (const h of [...queue]) this.settle(h, "timeout");
  }

  private settle(h: Held, outcome: HoldOutcome): void {
    const queue = this.pools.get(h.pool);
    const i = queue ? queue.indexOf(h) : -1;
    if (i < 0) return; // already settled
    queue!.splice(i, 1);
    if (queue!.length === 0) this.pools.delete(h.pool);
    this.count--;
    this.bytes -= h.bytes;
    h.timer.cancel();
    h.done(outcome);
  }
}
