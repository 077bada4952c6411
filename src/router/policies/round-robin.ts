// round-robin: each model's requests cycle through its candidates in worker-id order. The counter is
// per model (one model's traffic does not skew another's cycle) and survives candidate-set changes:
// the next pick is simply counter mod the current number of candidates.
import type { Policy, PolicyFactory } from "../types.ts";
import { loadTerms } from "../load.ts";

export const roundRobin: PolicyFactory = {
  name: "round-robin",
  create(): Policy {
    const counters = new Map<string, number>();
    return {
      name: "round-robin",
      pick(req, candidates, ctx) {
        const order = candidates.map((w) => w.id).sort();
        const counter = counters.get(req.model) ?? 0;
        const chosen = order[counter % order.length]!;
        if (!ctx.dryRun) counters.set(req.model, (counter + 1) % 1_000_000_007);
        return {
          chosen,
          candidates: candidates.map((w) => ({
            worker: w.id,
            node: w.node,
            terms: { position: order.indexOf(w.id), counter, ...loadTerms(w) },
          })),
          reason: `turn ${counter} of the cycle over ${order.length} workers`,
        };
      },
    };
  },
};
