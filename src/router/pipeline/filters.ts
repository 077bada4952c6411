// Every filter, defined once. The Router runs BASE_FILTERS on every request (model → state `ready`
// → role (`aggregated` unless the request or its leg preset names one) → pinned worker → not excluded after a failure; each removal listed in `decision.filtered`,
// nothing left = 503); a pipeline's configured filters (router.pipeline.filters) then run as
// guards, each skipped when it would drop every worker. `healthy` is the state filter under its
// pipeline name. `overload` is SGLang's imbalance guard (docs/references.md#routers-6) as a filter: the cluster is
// imbalanced when (max − min) > abs AND max > rel × min (load in requests, ../load.ts); here each
// worker is judged against the least loaded one by the same two tests, and dropped when it fails
// both. The least loaded worker always passes, so the guard never empties the set; a hot prefix
// therefore spills to other workers instead of queueing on its cached one. `kv-headroom` (the P/D
// decode leg's guard) drops a worker whose scraped KV usage leaves no room for another request's
// blocks (it would preempt or queue it); unscraped workers pass.
import type { KvHeadroomConfig, OverloadGuardConfig } from "../../config/types.ts";
import type { Worker } from "../../workers/worker.ts";
import { effectiveLoad } from "../load.ts";
import type { Filter, FilterFacts, Needs } from "./types.ts";

/** A filter that judges each worker on its own. */
function perWorker(type: string, needs: Needs, ok: (w: Readonly<Worker>, f: FilterFacts) => boolean): Filter {
  return {
    type,
    needs,
    accepts: ok,
    keep(ws, f) {
      const keep = new Set<string>();
      for (const w of ws) if (ok(w, f)) keep.add(w.id);
      return keep;
    },
  };
}

export const modelFilter = perWorker("model", {}, (w, f) => w.model === f.req.model);

/** Only `ready` workers take traffic: not starting, draining, failed or stopped. */
export const stateFilter = perWorker("state", {}, (w) => w.state === "ready");
export const healthyFilter: Filter = { ...stateFilter, type: "healthy" };

/**
 * A request goes to workers of the role it needs (RouteRequest.role): aggregated unless a P/D leg
 * asks for prefill or decode workers.
 */
export const roleFilter = perWorker("role", { role: true }, (w, f) => {
  const want = f.req.role ?? "aggregated";
  return typeof want === "string" ? w.role === want : want.includes(w.role);
});

/** A retry never goes back to a worker that already failed this request. */
/** A request pinned to one worker (RouteRequest.worker: an on-demand LoRA adapter's engine) goes nowhere else. */
export const pinnedFilter = perWorker("pinned", {}, (w, f) => f.req.worker === undefined || w.id === f.req.worker);

export const excludedFilter = perWorker("excluded", {}, (w, f) => !f.req.exclude.has(w.id));

export function overloadFilter(cfg: OverloadGuardConfig): Filter {
  return {
    type: "overload",
    needs: { load: true },
    keep(ws) {
      let min = Infinity;
      for (const w of ws) min = Math.min(min, effectiveLoad(w.load));
      const keep = new Set<string>();
      for (const w of ws) {
        const l = effectiveLoad(w.load);
        if (!(l - min > cfg.abs_threshold && l > cfg.rel_threshold * min)) keep.add(w.id);
      }
      return keep;
    },
  };
}

export function kvHeadroomFilter(cfg: KvHeadroomConfig): Filter {
  return perWorker("kv-headroom", { load: true }, (w) => w.load.kv_usage === null || w.load.kv_usage < cfg.max_kv_usage);
}

/** The model filter comes first so `decision.filtered` lists only the model's own workers. */
export const BASE_FILTERS: readonly Filter[] = [modelFilter, stateFilter, roleFilter, pinnedFilter, excludedFilter];
