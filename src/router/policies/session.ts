// session: requests carrying the same session id go to the same worker (its KV cache holds the
// conversation), by consistent hashing on a ring with virtual nodes, with bounded load in the
// spirit of Mirrokni, Thorup, Zadimoghaddam (2017): a worker is skipped when its load exceeds
// bound = load_factor × mean_load + 1 (mean over the candidates, load as in ../load.ts; the wording
// of router.session.load_factor in the config), and the request walks clockwise to the next worker
// on the ring. A hot session therefore spills to a consistent second worker instead of pinning an
// overloaded one. The least loaded worker is never above the mean, so with load_factor ≥ 1 the walk
// always ends. No session id → least-loaded.
import type { RouterConfig } from "../../config/types.ts";
import type { Policy, PolicyFactory } from "../types.ts";
import { argminRandomTie, effectiveLoad, loadKey, loadTerms } from "../load.ts";
import { HashRing } from "../ring.ts";

/** Rings are memoised per candidate set (usually one per model); bounded so retries can't grow it. */
const RING_CACHE_MAX = 64;

export const session: PolicyFactory = {
  name: "session",
  create(config: RouterConfig): Policy {
    const loadFactor = Math.max(1, config.session.load_factor);
    const virtualNodes = Math.min(1000, Math.max(1, config.session.virtual_nodes));
    const rings = new Map<string, HashRing>();
    const ringFor = (ids: string[]): HashRing => {
      const key = ids.join("\n");
      let r = rings.get(key);
      if (!r) {
        if (rings.size >= RING_CACHE_MAX) rings.delete(rings.keys().next().value!);
        r = new HashRing(ids, virtualNodes);
        rings.set(key, r);
      }
      return r;
    };
    return {
      name: "session",
      pick(req, candidates, ctx) {
        if (req.sessionId === null || req.sessionId === "") {
          const i = argminRandomTie(candidates.map(loadKey), ctx.rng);
          return {
            chosen: candidates[i]!.id,
            candidates: candidates.map((w) => ({ worker: w.id, node: w.node, terms: { ring_rank: null, ...loadTerms(w) } })),
            reason: `no session id; least-loaded fallback (load ${loadKey(candidates[i]!)[0]})`,
          };
        }
        const byId = new Map(candidates.map((w) => [w.id, w]));
        const ids = [...byId.keys()].sort();
        const order = ringFor(ids).walk(req.sessionId).map((k) => ids[k]!);
        let total = 0;
        for (const w of candidates) total += effectiveLoad(w.load);
        const bound = round3(loadFactor * (total / candidates.length) + 1);
        const chosen = order.find((id) => effectiveLoad(byId.get(id)!.load) <= bound) ?? order[0]!;
        const rank = order.indexOf(chosen);
        const home = order[0]!;
        return {
          chosen,
          candidates: candidates.map((w) => ({
            worker: w.id,
            node: w.node,
            terms: { ring_rank: order.indexOf(w.id), bound, over_bound: effectiveLoad(w.load) > bound ? 1 : 0, ...loadTerms(w) },
          })),
          reason:
            rank === 0
              ? `session home worker (load ${effectiveLoad(byId.get(home)!.load)} ≤ bound ${bound})`
              : `session home ${home} over bound ${bound}; spilled ${rank} step(s) clockwise on the ring`,
        };
      },
    };
  },
};

/** Three decimals are plenty for a load bound and keep explain output readable. */
function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
