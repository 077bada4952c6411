// Pickers: turn the rows (summed weighted cost per candidate) into one index, drawing only from the
// Rng they are given, and say why in one sentence. Each reads the rows' cost, so "load" below means
// the cost of the preset's scorers (the `load` scorer: effective load in requests, ../load.ts).
//
// softmax      Dynamo's sampling over min-max normalised cost at router.kv.temperature (0 = min).
// min          the cheapest row; exact ties uniformly at random.
// lightest     the cheapest row; ties to the lower KV usage, then uniformly at random.
// power-of-two two distinct rows drawn at random, the lighter wins (as `lightest`). Nearly as good
//              as least-loaded at spreading load, without every router replica herding onto the
//              same "least loaded" worker between scrapes.
// random       a uniform draw (cost is shown, not used).
// round-robin  each model's requests cycle through the rows in worker-id order. The counter is per
//              model and survives candidate-set changes (counter mod the current count); it
//              advances in commit, so explain does not move it.
// ring         sessions on a consistent-hash ring (../ring.ts) with bounded load in the spirit of
//              Mirrokni, Thorup, Zadimoghaddam (2017): a worker is skipped when its cost exceeds
//              bound = load_factor × mean cost + 1 (router.session.load_factor), walking clockwise,
//              so a hot session spills to a consistent second worker. The least loaded worker is
//              never above the mean, so with load_factor ≥ 1 the walk ends. No session id → lightest.
import type { RouterConfig } from "../../config/types.ts";
import { pickByCost } from "../cost.ts";
import { argminRandomTie } from "../load.ts";
import { HashRing } from "../ring.ts";
import type { Picker, Row } from "./types.ts";
import { r3 } from "./scorers.ts";

function cheapestReason(rows: readonly Row[], i: number, sampled: boolean): string {
  return `${sampled ? "sampled" : "lowest"} cost ${r3(rows[i]!.cost)} among ${rows.length} worker(s)`;
}

export function softmaxPicker(temperature: number): Picker {
  return {
    type: "softmax",
    needs: {},
    pick(rows, _f, rng) {
      const costs = rows.map((r) => r.cost);
      const i = pickByCost(costs, temperature, rng);
      return { index: i, reason: cheapestReason(rows, i, rows.length > 1 && Math.min(...costs) !== costs[i]) };
    },
  };
}

export const minPicker: Picker = {
  type: "min",
  needs: {},
  pick(rows, _f, rng) {
    const i = pickByCost(
      rows.map((r) => r.cost),
      0,
      rng,
    );
    return { index: i, reason: cheapestReason(rows, i, false) };
  },
};

/** Sort key: cost, then KV usage (unknown counts as 0). */
function lightKey(r: Row): [number, number] {
  return [r.cost, r.worker.load.kv_usage ?? 0];
}

export const lightestPicker: Picker = {
  type: "lightest",
  needs: {},
  pick(rows, _f, rng) {
    const i = argminRandomTie(rows.map(lightKey), rng);
    return { index: i, reason: `lowest load = max(in_flight, running + waiting) = ${rows[i]!.cost} among ${rows.length} workers` };
  },
};

export const powerOfTwoPicker: Picker = {
  type: "power-of-two",
  needs: {},
  pick(rows, _f, rng) {
    const n = rows.length;
    const a = rng.int(n);
    let b = a;
    if (n > 1) {
      b = rng.int(n - 1);
      if (b >= a) b++;
    }
    const pair = a === b ? [a] : [a, b];
    const win = pair[argminRandomTie(pair.map((i) => lightKey(rows[i]!)), rng)]!;
    rows.forEach((r, i) => (r.terms.sampled = pair.includes(i) ? 1 : 0));
    const other = pair.find((i) => i !== win);
    const reason =
      other === undefined
        ? "only one candidate"
        : `lighter of the two sampled (${rows[win]!.worker.id} load ${rows[win]!.cost} vs ${rows[other]!.worker.id} load ${rows[other]!.cost})`;
    return { index: win, reason };
  },
};

export const randomPicker: Picker = {
  type: "random",
  needs: {},
  pick(rows, _f, rng) {
    return { index: rng.int(rows.length), reason: `uniform draw among ${rows.length} workers` };
  },
};

/** Counters wrap here (a prime, so a cycle over any worker count stays fair across the wrap). */
const ROUND_ROBIN_WRAP = 1_000_000_007;

export function roundRobinPicker(): Picker {
  const counters = new Map<string, number>();
  return {
    type: "round-robin",
    needs: {},
    pick(rows, f) {
      const order = rows.map((r) => r.worker.id).sort();
      const counter = counters.get(f.req.model) ?? 0;
      const chosen = order[counter % order.length]!;
      for (const r of rows) {
        r.terms.position = order.indexOf(r.worker.id);
        r.terms.counter = counter;
      }
      return { index: rows.findIndex((r) => r.worker.id === chosen), reason: `turn ${counter} of the cycle over ${order.length} workers` };
    },
    commit(_chosen, f) {
      counters.set(f.req.model, ((counters.get(f.req.model) ?? 0) + 1) % ROUND_ROBIN_WRAP);
    },
  };
}

/** Rings are memoised per candidate set (usually one per model); bounded so retries can't grow it. */
const RING_CACHE_MAX = 64;

export function ringPicker(cfg: RouterConfig["session"]): Picker {
  const loadFactor = Math.max(1, cfg.load_factor);
  const virtualNodes = Math.min(1000, Math.max(1, cfg.virtual_nodes));
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
    type: "ring",
    needs: { sessionKey: true },
    pick(rows, f, rng) {
      const id = f.req.sessionId;
      if (id === null || id === "") {
        const i = argminRandomTie(rows.map(lightKey), rng);
        for (const r of rows) r.terms.ring_rank = null;
        return { index: i, reason: `no session id; least-loaded fallback (load ${rows[i]!.cost})` };
      }
      const byId = new Map(rows.map((r) => [r.worker.id, r]));
      const ids = [...byId.keys()].sort();
      const order = ringFor(ids)
        .walk(id)
        .map((k) => ids[k]!);
      let total = 0;
      for (const r of rows) total += r.cost;
      const bound = r3(loadFactor * (total / rows.length) + 1);
      const chosen = order.find((w) => byId.get(w)!.cost <= bound) ?? order[0]!;
      const rank = order.indexOf(chosen);
      const home = order[0]!;
      for (const r of rows) {
        r.terms.ring_rank = order.indexOf(r.worker.id);
        r.terms.bound = bound;
        r.terms.over_bound = r.cost > bound ? 1 : 0;
      }
      return {
        index: rows.indexOf(byId.get(chosen)!),
        reason:
          rank === 0
            ? `session home worker (load ${byId.get(home)!.cost} ≤ bound ${bound})`
            : `session home ${home} over bound ${bound}; spilled ${rank} step(s) clockwise on the ring`,
      };
    },
  };
}
