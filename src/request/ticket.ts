// One ticket per request, from arrival to the last byte: its admission slot, the lease of the
// attempt under way, the abort signal that attempt runs under, and its outcome. `release(outcome)`
// runs exactly once (a second call is a no-op): it ends the lease, frees the slot and records the
// outcome. Every herd metric about a request is recorded here, through a RequestRecorder, and
// nowhere else; the frontend's in-flight count is the number of tickets holding a slot (the
// per-worker count a policy reads is the lease's, owned by the router).
import type { Clock } from "../core/clock.ts";
import { NOOP_SPAN, type Span } from "../core/trace.ts";
import type { HerdMetrics, RejectReason, UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import type { Decision, Lease } from "../router/index.ts";
import type { Leg } from "./plan.ts";
import type { WorkerRegistry } from "../workers/registry.ts";

/** Why an attempt was aborted; carried as its AbortSignal's reason. */
export class AbortCause {
  constructor(
    /**
     * `plan`: an orchestrated plan cancelled the leg (SGLang: its pair's prefill failed). `drain`:
     * its worker (or this node) reached its drain deadline — a committed stream migrates, an attempt
     * before its commit point is retried elsewhere (issue 21).
     */
    readonly kind: "client" | "client_stalled" | "first_token_timeout" | "idle_timeout" | "worker_down" | "shutdown" | "plan" | "drain",
    readonly message: string,
  ) {}
}

const clientGone = () => new AbortCause("client", "client disconnected");

export type ClientPhase = "upload" | "before_first_token" | "streaming";

/** How a request ended. `status` is what the client was (or would have been) answered. */
export type Outcome =
  /** Answered in full (200), or the worker's own 4xx relayed as it said it. */
  | { kind: "complete"; status: number; cachedTokens: number | null; outputTokens?: number | null }
  /** herd answered itself before any worker was involved (400, 404, 408, 413, 429, 503, …). */
  | { kind: "refused"; status: number; reason: RejectReason | null }
  /** The worker(s) failed before the commit point: 502, 504 or 503 (shutdown). */
  | { kind: "upstream_failed"; status: number; reason: UpstreamErrorKind }
  /** The worker failed after the commit point: the client got a 200 and then an error event. */
  | { kind: "broken"; reason: UpstreamErrorKind }
  /** The client hung up (mid-upload, before the first token, or mid-stream). Never a 5xx. */
  | { kind: "client_closed"; phase: ClientPhase }
  /** The client stopped reading a stream for longer than idle_timeout_ms. Never charged to a worker. */
  | { kind: "client_stalled" };

/** The HTTP status an outcome is counted under (499: the client closed before an answer). */
export function outcomeStatus(o: Outcome): number {
  switch (o.kind) {
    case "complete":
    case "refused":
    case "upstream_failed":
      return o.status;
    case "client_closed":
      return o.phase === "streaming" ? 200 : 499;
    default:
      return 200;
  }
}

/** Where a ticket's facts go: herd's Prometheus metrics in production, a run record in simulate. */
export interface RequestRecorder {
  inFlight(n: number): void;
  firstToken(t: Ticket): void;
  upstreamError(workerId: string, reason: UpstreamErrorKind): void;
  retry(t: Ticket, reason: UpstreamErrorKind): void;
  /** A stream's worker failed after tokens were sent: migrated, or why not (src/request/migrate.ts). */
  migration?(t: Ticket, reason: UpstreamErrorKind, result: string): void;
  done(t: Ticket, o: Outcome): void;
}

/**
 * The production recorder: herd's metrics (src/metrics), and `records` (the decision records of
 * record.ts: the status page, the decision log) with every released ticket.
 */
export function metricsRecorder(m: HerdMetrics, clock: Clock, records?: (t: Ticket, o: Outcome) => void): RequestRecorder {
  const seconds = (t: Ticket) => (clock.now() - t.arrivedAtMs) / 1000;
  return {
    inFlight: (n) => m.setFrontendInFlight(n),
    firstToken: (t) => m.firstToken(t.model ?? "", seconds(t)),
    upstreamError: (w, reason) => m.upstreamError(w, reason),
    retry: (t, reason) => m.retry(t.model ?? "", reason),
    migration: (t, reason, result) => m.migration(t.model ?? "", reason, result),
    done(t, o) {
      records?.(t, o);
      m.request(t.model, t.workerId, outcomeStatus(o));
      if (o.kind === "refused" && o.reason) m.reject(o.reason);
      if (o.kind === "client_closed") m.clientFailure(t.model, "client_closed", o.phase);
      if (o.kind === "client_stalled") m.clientFailure(t.model, "client_stalled", "streaming");
      if (o.kind === "complete" && o.status === 200) {
        m.finished(t.model ?? "", seconds(t));
        const n = o.outputTokens ?? 0;
        if (t.firstTokenAtMs !== null && n >= 2) m.timePerOutputToken(t.model ?? "", (clock.now() - t.firstTokenAtMs) / 1000 / (n - 1));
        if (o.cachedTokens !== null) m.cachedTokens(t.model ?? "", t.predictedCachedTokens, o.cachedTokens, t.leg?.route.promptTokens ?? 0);
      }
    },
  };
}

/** The admission slots (frontend.max_in_flight) and every live ticket; drain waits on it. */
export class Admission {
  private readonly live = new Set<Ticket>();
  private readonly idleWaiters = new Set<() => void>();
  draining = false;

  constructor(
    readonly clock: Clock,
    readonly recorder: RequestRecorder,
    public maxInFlight: number,
  ) {}

  /** A ticket for a request that just arrived (no slot yet: see Ticket.admit). */
  ticket(clientSignal: AbortSignal | null = null): Ticket {
    return new Ticket(this, this.clock.now(), clientSignal);
  }

  /** Requests holding a slot (admitted, not yet released; streams count until their last byte). */
  get size(): number {
    return this.live.size;
  }

  /** Resolves true when no ticket holds a slot, or false after timeoutMs. */
  waitIdle(timeoutMs: number): Promise<boolean> {
    if (this.live.size === 0) return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = this.clock.setTimer(timeoutMs, () => {
        this.idleWaiters.delete(done);
        resolve(false);
      });
      const done = () => {
        timer.cancel();
        resolve(true);
      };
      this.idleWaiters.add(done);
    });
  }

  /** Abort the attempts running on a worker; returns how many. */
  abortWorker(workerId: string, cause: AbortCause): number {
    let n = 0;
    for (const t of [...this.live]) if (t.abortAttempt(cause, workerId)) n++;
    return n;
  }

  abortAll(cause: AbortCause): void {
    for (const t of [...this.live]) t.abortAttempt(cause);
  }

  /**
   * Abort requests on workers that go from serving to failed/stopped/starting (a restart) or leave
   * the registry. `draining` is deliberately not here: a drain lets admitted requests finish.
   */
  watch(registry: WorkerRegistry): () => void {
    return registry.onChange((ch) => {
      if (ch.type === "removed") this.abortWorker(ch.worker.id, new AbortCause("worker_down", `worker ${ch.worker.id} was removed`));
      else if (ch.type === "updated") {
        const serving = (s: string) => s === "ready" || s === "draining";
        if (serving(ch.previous.state) && !serving(ch.worker.state))
          this.abortWorker(ch.worker.id, new AbortCause("worker_down", `worker ${ch.worker.id} went ${ch.worker.state}`));
      }
    });
  }

  /** @internal Ticket → admission. */
  take(t: Ticket): boolean {
    if (this.live.size >= this.maxInFlight) return false;
    this.live.add(t);
    this.recorder.inFlight(this.live.size);
    return true;
  }

  /** @internal */
  free(t: Ticket): void {
    if (!this.live.delete(t)) return;
    this.recorder.inFlight(this.live.size);
    if (this.live.size === 0) {
      for (const w of [...this.idleWaiters]) w();
      this.idleWaiters.clear();
    }
  }
}

export class Ticket {
  model: string | null = null;
  /** The worker of the attempt under way (or the last one). */
  workerId: string | null = null;
  /** The policy's predicted cached tokens on that worker (null: no prediction). */
  predictedCachedTokens: number | null = null;
  /** The leg of that attempt (its route: prompt tokens, block hashes, session; max_tokens); null before one. */
  leg: Pick<Leg, "route" | "maxTokens"> | null = null;
  /** The routing decision of the attempt under way (null for pinned legs a plan chose). */
  decision: Decision | null = null;
  /** Clock time of the first token, null before it. */
  firstTokenAtMs: number | null = null;
  outcome: Outcome | null = null;
  /** The request's span (`herd.request`, src/request/spans.ts); ended at release with the outcome. */
  span: Span = NOOP_SPAN;
  /**
   * Attempts under way, by their abort controller: one for a routed request; an orchestrated plan
   * may run two at once (SGLang's flow sends the prefill and the decode leg together).
   */
  private readonly attempts = new Map<AbortController, { lease: Lease; workerId: string }>();
  /** The ticket is listening on clientSignal (handleEvent), from its first attempt to its release. */
  private listening = false;
  /** Run once at release (the frontend's tenant slot and fair-queue grant). */
  private readonly onReleased: (() => void)[] = [];

  constructor(
    private readonly adm: Admission,
    readonly arrivedAtMs: number,
    /** Aborts when the client disconnects. */
    readonly clientSignal: AbortSignal | null,
  ) {}

  get released(): boolean {
    return this.outcome !== null;
  }

  /** Take an admission slot; false when frontend.max_in_flight slots are taken (→ 429). */
  admit(): boolean {
    return this.adm.take(this);
  }

  /**
   * Start an attempt on a worker under a fresh abort signal that also fires when the client leaves.
   * The attempts under way end first (a retry replaces the failed attempt), unless `alongside`
   * (a leg an orchestrated plan runs next to another).
   */
  beginAttempt(workerId: string, lease: Lease, predictedCachedTokens: number | null, alongside = false, leg: Pick<Leg, "route" | "maxTokens"> | null = null): AbortController {
    if (!alongside) this.endAttempt();
    this.leg = leg;
    const ac = new AbortController();
    this.workerId = workerId;
    this.predictedCachedTokens = predictedCachedTokens;
    const client = this.clientSignal;
    if (client) {
      if (client.aborted) ac.abort(clientGone());
      else if (!this.listening) {
        // One listener per ticket, the ticket itself (handleEvent), for all its attempts: was a
        // closure and an unlink closure per attempt, added and removed each time.
        client.addEventListener("abort", this);
        this.listening = true;
      }
    }
    this.attempts.set(ac, { lease, workerId });
    return ac;
  }

  /** @internal The client's signal aborted (EventListener): every attempt under way ends as the client's. */
  handleEvent(): void {
    for (const ac of this.attempts.keys()) if (!ac.signal.aborted) ac.abort(clientGone());
  }

  /** An attempt is over (failed before the commit point, or read whole): its lease ends. No argument: every attempt. */
  endAttempt(ac?: AbortController): void {
    if (ac !== undefined) {
      const a = this.attempts.get(ac);
      if (a === undefined) return;
      this.attempts.delete(ac);
      return a.lease.release();
    }
    if (this.attempts.size === 0) return; // the usual case at release: no Map iterator, no entry arrays
    // (Deleting the entry being visited is safe in a Map's iteration.)
    for (const [k, a] of this.attempts) {
      this.attempts.delete(k);
      a.lease.release();
    }
  }

  /** Abort the attempts under way (on `workerId` only, when given); true when one was aborted. */
  abortAttempt(cause: AbortCause, workerId?: string): boolean {
    let n = 0;
    for (const [ac, a] of this.attempts) {
      if ((workerId !== undefined && a.workerId !== workerId) || ac.signal.aborted) continue;
      ac.abort(cause);
      n++;
    }
    return n > 0;
  }

  /** The client's first token, from the attempt `ac` (default: every attempt under way). */
  firstToken(ac?: AbortController): void {
    this.firstTokenAtMs ??= this.adm.clock.now();
    for (const [k, a] of this.attempts) if (ac === undefined || k === ac) a.lease.firstToken();
    this.adm.recorder.firstToken(this);
  }

  /**
   * The engine's first token of a request the client gets whole (collect.ts): the lease learns it
   * (prefill over), but the client saw no token, so no TTFT is recorded.
   */
  engineFirstToken(ac: AbortController): void {
    this.attempts.get(ac)?.lease.firstToken();
  }

  upstreamFailed(workerId: string, reason: UpstreamErrorKind): void {
    this.adm.recorder.upstreamError(workerId, reason);
  }

  /** A stream's worker failed after tokens were sent: `result` is `migrated` or why not. */
  migration(reason: UpstreamErrorKind, result: string): void {
    this.adm.recorder.migration?.(this, reason, result);
  }

  retry(reason: UpstreamErrorKind): void {
    this.adm.recorder.retry(this, reason);
  }

  /** The request is over. Exactly once: a second call changes nothing and records nothing. */
  release(outcome: Outcome): void {
    if (this.outcome !== null) return;
    this.outcome = outcome;
    this.endAttempt();
    if (this.listening) {
      this.clientSignal!.removeEventListener("abort", this);
      this.listening = false;
    }
    this.adm.free(this);
    this.adm.recorder.done(this, outcome);
    // Index loop, no splice copy: a callback registering another runs it at once (outcome is set).
    const fns = this.onReleased;
    for (let i = 0; i < fns.length; i++) fns[i]!();
    fns.length = 0;
    if (!this.span.recording) return this.span.end();
    const status = outcomeStatus(outcome);
    this.span.set({ "herd.outcome": outcome.kind, "http.response.status_code": status, ...(this.model ? { "gen_ai.request.model": this.model } : {}), ...(this.workerId ? { "herd.worker": this.workerId } : {}) });
    this.span.end(status >= 500 || outcome.kind === "broken" ? outcome.kind : undefined);
  }

  /** Call `fn` when the request is over (at once if it already is). */
  onRelease(fn: () => void): void {
    if (this.outcome !== null) fn();
    else this.onReleased.push(fn);
  }
}
