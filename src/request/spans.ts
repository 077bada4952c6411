// The request's spans (issue 23) through the tracing seam (src/core/trace.ts): the ticket holds the
// request's span (`herd.request`, continuing the caller's traceparent), and the lifecycle opens its
// children here and in lifecycle.ts (`herd.attempt` / `herd.leg.<name>`). Off, every span is
// NOOP_SPAN and nothing below computes its attributes.
import { errorMessage } from "../core/errors.ts";
import { NOOP_SPAN, type Span, type SpanAttrs } from "../core/trace.ts";
import type { Decision } from "../router/index.ts";
import type { Leg } from "./plan.ts";

/** Candidates listed in `herd.candidates_json` (the rest are counted in `herd.candidates`). */
const LISTED_CANDIDATES = 16;

/** The router's decision as attributes: the chosen worker, why, its cost terms, and every candidate's (bounded). */
export function decisionAttrs(d: Pick<Decision, "policy" | "chosen" | "reason" | "candidates" | "filtered">): SpanAttrs {
  const out: SpanAttrs = { "herd.policy": d.policy, "herd.worker": d.chosen, "herd.reason": d.reason, "herd.candidates": d.candidates.length, "herd.filtered": d.filtered.length };
  const chosen = d.candidates.find((c) => c.worker === d.chosen);
  if (chosen) {
    out["herd.worker_node"] = chosen.node;
    for (const [k, v] of Object.entries(chosen.terms)) if (v !== null) out[`herd.term.${k}`] = v;
  }
  out["herd.candidates_json"] = JSON.stringify(d.candidates.slice(0, LISTED_CANDIDATES).map((c) => ({ worker: c.worker, ...c.terms })));
  return out;
}

/** Run `route` under a `herd.route` span, a child of `parent`; ended whether it chose or threw. */
export function routeSpan<R extends { decision: Decision }>(parent: Span, attrs: () => SpanAttrs, route: () => R): R {
  if (parent === NOOP_SPAN) return route(); // tracing off: nothing allocated
  const s = parent.child("herd.route", attrs());
  if (!s.recording) {
    // Unsampled: no attributes to compute; the span still ends (the SDK's non-recording span).
    try {
      return route();
    } finally {
      s.end();
    }
  }
  try {
    const r = route();
    s.set(decisionAttrs(r.decision));
    s.end();
    return r;
  } catch (e) {
    s.end(errorMessage(e));
    throw e;
  }
}

/** One attempt of a leg on a worker: `herd.attempt` for an aggregated request, `herd.leg.prefill` … for a plan's legs. */
export function attemptSpan(parent: Span, leg: Leg, id: string, workerId: string): Span {
  if (parent === NOOP_SPAN) return NOOP_SPAN;
  return parent.child(leg.name === "main" ? "herd.attempt" : `herd.leg.${leg.name}`, { "herd.leg": leg.name, "herd.attempt_id": id, "herd.worker": workerId, "herd.stream": leg.stream }, "client");
}
