// least-loaded: the candidate with the lowest effective load = max(in_flight, running + waiting)
// (see ../load.ts), then lowest KV usage, then a seeded random tie break.
import type { Policy, PolicyFactory } from "../types.ts";
import { argminRandomTie, loadKey, loadTerms } from "../load.ts";

export const leastLoaded: PolicyFactory = {
  name: "least-loaded",
  create(): Policy {
    return {
      name: "least-loaded",
      pick(_req, candidates, ctx) {
        const i = argminRandomTie(candidates.map(loadKey), ctx.rng);
        const chosen = candidates[i]!;
        return {
          chosen: chosen.id,
          candidates: candidates.map((w) => ({ worker: w.id, node: w.node, terms: { ...loadTerms(w) } })),
          reason: `lowest load = max(in_flight, running + waiting) = ${loadKey(chosen)[0]} among ${candidates.length} workers`,
        };
      },
    };
  },
};
