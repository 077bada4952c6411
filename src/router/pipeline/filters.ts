// Pipeline filters. `healthy`, `model` and `role` repeat the Router's own pre-filters so a composed
// pipeline reads complete on its own; `overload` is SGLang's imbalance guard (routers.md §6) as a
// filter: the cluster is imbalanced when (max − min) > abs AND max > rel × min (load in requests,
// ../load.ts); here each worker is judged against the least loaded one by the same two tests, and
// dropped when it fails both. The least loaded worker always passes, so the guard never empties
// the set; a hot prefix therefore spills to other workers instead of queueing on its cached one.
import type { OverloadGuardConfig } from "../../config/types.ts";
import { effectiveLoad } from "../load.ts";
import type { PipelineFilter } from "./types.ts";

export const healthyFilter: PipelineFilter = {
  type: "healthy",
  keep: (ws) => new Set(ws.filter((w) => w.state === "ready").map((w) => w.id)),
};

export const modelFilter: PipelineFilter = {
  type: "model",
  keep: (ws, f) => new Set(ws.filter((w) => w.model === f.req.model).map((w) => w.id)),
};

export const roleFilter: PipelineFilter = {
  type: "role",
  keep: (ws) => new Set(ws.filter((w) => w.role === "aggregated").map((w) => w.id)),
};

export function overloadFilter(cfg: OverloadGuardConfig): PipelineFilter {
  return {
    type: "overload",
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
