// Every pipeline stage, one line each, and the one function that builds a pipeline from
// `router.pipeline` (+ the `router.kv` knobs). No import side effects; a new stage is one entry
// here and its name in PIPELINE_* in src/config/types.ts, so the config accepts it.
import type {
  PipelineFilterName,
  PipelinePickerName,
  PipelineScorerName,
  RouterConfig,
} from "../../config/types.ts";
import type { Rng } from "../../core/rng.ts";
import { pickByCost } from "../cost.ts";
import { healthyFilter, modelFilter, overloadFilter, roleFilter } from "./filters.ts";
import { kvCostScorer, loadScorer, sessionScorer } from "./scorers.ts";
import type { Picker, Pipeline, PipelineFilter, Scorer } from "./types.ts";

const FILTERS: Record<PipelineFilterName, (cfg: RouterConfig) => PipelineFilter> = {
  healthy: () => healthyFilter,
  model: () => modelFilter,
  role: () => roleFilter,
  overload: (cfg) => overloadFilter(cfg.pipeline.overload),
};

const SCORERS: Record<PipelineScorerName, (cfg: RouterConfig) => Scorer> = {
  "kv-cost": (cfg) => kvCostScorer(cfg.kv),
  load: () => loadScorer,
  session: () => sessionScorer,
};

const PICKERS: Record<PipelinePickerName, (cfg: RouterConfig) => Picker> = {
  softmax: (cfg) => ({ type: "softmax", pick: (costs: readonly number[], rng: Rng) => pickByCost(costs, cfg.kv.temperature, rng) }),
  min: () => ({ type: "min", pick: (costs: readonly number[], rng: Rng) => pickByCost(costs, 0, rng) }),
};

/** Build the pipeline `router.pipeline` describes. The config layer has validated every name. */
export function buildPipeline(cfg: RouterConfig): Pipeline {
  return {
    filters: cfg.pipeline.filters.map((n) => FILTERS[n](cfg)),
    scorers: cfg.pipeline.scorers.map((s) => ({ scorer: SCORERS[s.type](cfg), weight: s.weight })),
    picker: PICKERS[cfg.pipeline.picker](cfg),
  };
}
