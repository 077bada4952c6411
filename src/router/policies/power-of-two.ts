// power-of-two: draw two distinct candidates at random, send to the lighter (effective load, then KV
// usage; a full tie is a coin flip). Nearly as good as least-loaded at spreading load, but without
// every router replica herding onto the same "least loaded" worker between scrapes.
import type { Policy, PolicyFactory } from "../types.ts";
import { argminRandomTie, loadKey, loadTerms } from "../load.ts";

export const powerOfTwo: PolicyFactory = {
  name: "power-of-two",
  create(): Policy {
    return {
      name: "power-of-two",
      pick(_req, candidates, ctx) {
        const n = candidates.length;
        const a = ctx.rng.int(n);
        let b = a;
        if (n > 1) {
          b = ctx.rng.int(n - 1);
          if (b >= a) b++;
        }
        const pair = a === b ? [a] : [a, b];
        const win = pair[argminRandomTie(pair.map((i) => loadKey(candidates[i]!)), ctx.rng)]!;
        const chosen = candidates[win]!;
        const other = pair.find((i) => i !== win);
        return {
          chosen: chosen.id,
          candidates: candidates.map((w, i) => ({
            worker: w.id,
            node: w.node,
            terms: { sampled: pair.includes(i) ? 1 : 0, ...loadTerms(w) },
          })),
          reason:
            other === undefined
              ? "only one candidate"
              : `lighter of the two sampled (${chosen.id} load ${loadKey(chosen)[0]} vs ${candidates[other]!.id} load ${loadKey(candidates[other]!)[0]})`,
        };
      },
    };
  },
};
