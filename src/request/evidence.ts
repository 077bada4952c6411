// Attempts' evidence to the router's outlier detection (src/router/outlier.ts, evidence.ts): a
// RequestRecorder decorator, so the one place failures are reported (Ticket.upstreamFailed → the
// recorder) also ejects, and a first token or a complete answer re-admits a probed target.
import type { Router } from "../router/index.ts";
import type { RequestRecorder } from "./ticket.ts";

/** `router()` is read per call: a reload swaps the Router (the detector itself is shared). */
export function evidenceRecorder(inner: RequestRecorder, router: () => Router): RequestRecorder {
  return {
    inFlight: (n) => inner.inFlight(n),
    firstToken(t) {
      if (t.workerId !== null) router().reportSuccess(t.workerId);
      inner.firstToken(t);
    },
    upstreamError(workerId, reason) {
      router().reportFailure(workerId, reason);
      inner.upstreamError(workerId, reason);
    },
    retry: (t, reason) => inner.retry(t, reason),
    migration: (t, reason, result) => inner.migration?.(t, reason, result),
    done(t, o) {
      if (o.kind === "complete" && o.status === 200 && t.workerId !== null) router().reportSuccess(t.workerId);
      inner.done(t, o);
    },
  };
}
