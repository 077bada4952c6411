// An orchestrated plan (plan.ts `orchestrate`, P/D in src/pd/plan.ts): the plan chooses each leg's
// worker and decides its retries; the lifecycle sends each pinned leg through the same attempt code
// as a routed leg (Upstream, ticket attempt and lease, commit point, relay), with two differences
// the P/D failure rules need: a commit-bound timeout is a failure handed back to the plan, not a
// final 504, and a stream whose first event is an error event is a failure before the first token.
// Exactly one answer reaches the client: the first leg that answers it (committed, or an engine's
// own refusal), else herd's error built from how the plan ended.
import { HerdError, errorMessage } from "../core/errors.ts";
import { attemptOn, legId, upstreamFailure, type Answer, type LastFailure, type LifecycleDeps } from "./lifecycle.ts";
import type { LegRunner, PinnedEnd, PinnedLeg, Plan } from "./plan.ts";
import type { Ticket } from "./ticket.ts";

export function runOrchestrated<C>(d: LifecycleDeps<C>, t: Ticket, plan: Plan, requestId: string, done: (a: Answer<C>) => void): void {
  let answered = false;
  let lastFailure: LastFailure | null = null;
  let n = 0;
  const deliver = (a: Answer<C>) => {
    if (answered) return;
    answered = true;
    done(a);
  };
  const runner: LegRunner = {
    run(leg, signal, cb) {
      if (answered || signal.aborted || t.clientSignal?.aborted) return cb({ kind: "aborted" });
      runPinned(d, t, leg, legId(requestId, leg, n++), requestId, (r) => {
        if (r.kind === "answer") {
          deliver(r.answer);
          // Only a client leg's 200 answer is a commit; anything else that reached the client ends the plan.
          const committed = leg.toClient && (r.answer.kind === "stream" || (r.answer.kind === "whole" && r.answer.status === 200));
          return cb(committed ? { kind: "committed" } : { kind: "aborted" });
        }
        if (r.kind === "done") return cb(r);
        lastFailure = r.failure;
        cb({ kind: "failed", reason: r.failure.reason, status: null });
      });
    },
  };
  const signal = t.clientSignal ?? new AbortController().signal;
  const finish = (end: PinnedEnd | null, err?: unknown) => {
    if (answered) return;
    if (err !== undefined) d.log.error("orchestrated plan threw", { err: errorMessage(err) });
    if (end?.kind === "aborted" || t.clientSignal?.aborted) {
      t.release({ kind: "client_closed", phase: "before_first_token" });
      return deliver({ kind: "error", error: new HerdError(499, "invalid_request_error", "client closed the request", "client_closed") });
    }
    if (lastFailure === null && end?.kind === "failed" && end.status === 503) {
      // No worker of the needed role was there to try: herd's refusal, as for a routed request.
      t.release({ kind: "refused", status: 503, reason: "no_worker" });
      return deliver({ kind: "error", error: new HerdError(503, "service_unavailable", `no worker available: ${end.reason}`, "no_worker_available", null, { "retry-after": "1" }) });
    }
    deliver(upstreamFailure(t, lastFailure ?? { reason: "eof", message: "the plan ended without an answer", worker: t.workerId ?? "" }));
  };
  plan.orchestrate!(runner, requestId, signal).then(
    (end) => finish(end),
    (e: unknown) => finish(null, e),
  );
}

type PinnedResult<C> = { kind: "answer"; answer: Answer<C> } | { kind: "done"; text: string } | { kind: "failed"; failure: LastFailure };

function runPinned<C>(d: LifecycleDeps<C>, t: Ticket, leg: PinnedLeg, id: string, requestId: string, cb: (r: PinnedResult<C>) => void): void {
  const hashes = leg.route.blockHashes;
  const prompt = hashes ? { blockHashes: hashes, blockSize: leg.route.blockSize ?? 16, cachedTokens: 0 } : undefined;
  const lease = d.router.book(leg.workerId, leg.route.promptTokens, prompt);
  const ctx = { d, t, leg, last: leg.toClient, id, requestId, pinned: { commitTimeoutMs: leg.commitTimeoutMs } };
  attemptOn(ctx, leg.workerId, leg.workerUrl, lease, null, (r) => {
    if (r.kind === "answer") return cb({ kind: "answer", answer: r.answer });
    if (r.kind === "leg_done") return cb({ kind: "done", text: r.text });
    t.upstreamFailed(leg.workerId, r.reason);
    d.log.warn("P/D leg failed before its commit point", { worker: leg.workerId, leg: leg.name, reason: r.reason, err: r.message });
    cb({ kind: "failed", failure: { reason: r.reason, message: r.message, worker: leg.workerId } });
  });
}
