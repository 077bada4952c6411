// An orchestrated plan (plan.ts, P/D in src/pd/plan.ts): the plan sequences its legs and decides
// their retries; the lifecycle gives it a LegRunner that routes a leg through the router (the leg's
// preset) and sends it through the same attempt code as a routed leg (Upstream, ticket attempt and
// lease, commit point, relay), with two differences the P/D failure rules need: a commit-bound
// timeout is a failure handed back to the plan, not a final 504, and a stream whose first event is
// an error event is a failure before the first token. Each leg ends in one LegOutcome; the one
// callback → promise step is `run` below. Exactly one answer reaches the client: the first leg that
// answers it (committed, or an engine's own refusal), else herd's error built from how the plan ended.
import { HerdError, errorMessage } from "../core/errors.ts";
import { attemptOn, legId, upstreamFailure, type Answer, type LastFailure, type LifecycleDeps } from "./lifecycle.ts";
import type { LegOutcome, LegRunner, PinnedLeg, Plan } from "./plan.ts";
import type { Ticket } from "./ticket.ts";
import type { UpstreamErrorKind } from "../metrics/herd-metrics.ts";

type Orchestrated = Extract<Plan, { kind: "orchestrated" }>;

export function runOrchestrated<C>(d: LifecycleDeps<C>, t: Ticket, plan: Orchestrated, requestId: string, done: (a: Answer<C>) => void): void {
  let answered = false;
  let lastFailure: LastFailure | null = null;
  let n = 0;
  const deliver = (a: Answer<C>) => {
    if (answered) return;
    answered = true;
    done(a);
  };
  const runner: LegRunner = {
    route: (req, dryRun) => (dryRun ? d.router.explain(req) : d.router.route(req)),
    run: (leg, signal) =>
      new Promise<LegOutcome>((resolve) => {
        if (answered || signal.aborted || t.clientSignal?.aborted) return resolve({ kind: "aborted" });
        runPinned(d, t, leg, legId(requestId, leg, n++), requestId, signal, (r) => {
          if (r.kind === "committed") {
            deliver(r.answer);
            // herd's own final error (client gone, shutdown) ends the plan; anything else answered the client.
            return resolve(r.answer.kind === "error" ? { kind: "aborted" } : { kind: "committed", answer: null });
          }
          // An attempt's failure is always the upstream's (a leg without a worker never gets here).
          if (r.kind === "failed") lastFailure = { reason: r.reason as UpstreamErrorKind, message: r.message, worker: leg.worker.id };
          resolve(r);
        });
      }),
  };
  const signal = t.clientSignal ?? new AbortController().signal;
  const finish = (end: LegOutcome | null, err?: unknown) => {
    if (answered) return;
    if (err !== undefined) d.log.error("orchestrated plan threw", { err: errorMessage(err) });
    if (end?.kind === "aborted" || t.clientSignal?.aborted) {
      t.release({ kind: "client_closed", phase: "before_first_token" });
      return deliver({ kind: "error", error: new HerdError(499, "invalid_request_error", "client closed the request", "client_closed") });
    }
    if (lastFailure === null && end?.kind === "failed" && end.reason === "no_worker") {
      // No worker of the needed role was there to try: herd's refusal, as for a routed request.
      t.release({ kind: "refused", status: 503, reason: "no_worker" });
      return deliver({ kind: "error", error: new HerdError(503, "service_unavailable", `no worker available: ${end.message}`, "no_worker_available", null, { "retry-after": "1" }) });
    }
    deliver(upstreamFailure(t, lastFailure ?? { reason: "eof", message: "the plan ended without an answer", worker: t.workerId ?? "" }));
  };
  plan.run(runner, requestId, signal).then(
    (end) => finish(end),
    (e: unknown) => finish(null, e),
  );
}

/** One pinned leg: book its worker, attempt it once; a failure is the plan's to retry. */
function runPinned<C>(d: LifecycleDeps<C>, t: Ticket, leg: PinnedLeg, id: string, requestId: string, signal: AbortSignal, cb: (r: LegOutcome<Answer<C>>) => void): void {
  const hashes = leg.route.blockHashes;
  const prompt = hashes ? { blockHashes: hashes, blockSize: leg.route.blockSize ?? 16, cachedTokens: 0 } : undefined;
  const lease = d.router.book(leg.worker.id, leg.route.promptTokens, prompt);
  const ctx = { d, t, leg, toClient: leg.toClient, id, requestId, pinned: { commitTimeoutMs: leg.commitTimeoutMs, signal } };
  attemptOn(ctx, leg.worker.id, leg.worker.url, lease, null, (r) => {
    if (r.kind === "failed") {
      t.upstreamFailed(leg.worker.id, r.reason as UpstreamErrorKind);
      d.log.warn("P/D leg failed before its commit point", { worker: leg.worker.id, leg: leg.name, reason: r.reason, err: r.message });
    }
    cb(r);
  });
}
