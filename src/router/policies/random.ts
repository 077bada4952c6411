// random: uniform choice through the seeded Rng (reproducible for a seed; load is shown, not used).
import type { Policy, PolicyFactory } from "../types.ts";
import { loadTerms } from "../load.ts";

export const random: PolicyFactory = {
  name: "random",
  create(): Policy {
    return {
      name: "random",
      pick(_req, candidates, ctx) {
        const i = ctx.rng.int(candidates.length);
        return {
          chosen: candidates[i]!.id,
          candidates: candidates.map((w) => ({ worker: w.id, node: w.node, terms: { ...loadTerms(w) } })),
          reason: `uniform draw among ${candidates.length} workers`,
        };
      },
    };
  },
};
