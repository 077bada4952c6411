// Every pipeline stage, one line each, by the name `router.pipeline` uses, and the one function that
// builds a pipeline from such a spec. No import side effects. A new stage is one entry here and its
// name in PIPELINE_* in src/config/types.ts (so the config accepts it); a new policy is a preset
// over these names (../policies/).
import type {
  PipelineConfig,
  PipelineFilterName,
  PipelinePickerName,
  PipelineScorerConfig,
  PipelineScorerName,
  RouterConfig,
} from "../../config/types.ts";
import { healthyFilter, kvHeadroomFilter, modelFilter, overloadFilter, roleFilter } from "./filters.ts";
import { lightestPicker, minPicker, powerOfTwoPicker, randomPicker, ringPicker, roundRobinPicker, softmaxPicker } from "./pickers.ts";
import { decodeLoadScorer, kvCostScorer, loadScorer, overlapScorer, sessionScorer } from "./scorers.ts";
import { kvUtilizationScorer, noHitLruScorer, prefixShareScorer, queueScorer } from "./llm-d.ts";
import type { CacheSource, Filter, Picker, Pipeline, Scorer } from "./types.ts";

/** A filter's knobs come from the spec that lists it (router.pipeline, or a P/D leg's). */
type FilterKnobs = Pick<PipelineConfig, "overload" | "kv_headroom">;

export const FILTERS: Record<PipelineFilterName, (knobs: FilterKnobs) => Filter> = {
  healthy: () => healthyFilter,
  model: () => modelFilter,
  role: () => roleFilter,
  overload: (k) => overloadFilter(k.overload),
  "kv-headroom": (k) => kvHeadroomFilter(k.kv_headroom),
};

/** Factories, called once per Router: a stage with memory (session) gets its own. */
export const SCORERS: Record<PipelineScorerName, (cfg: RouterConfig) => Scorer> = {
  "kv-cost": (cfg) => kvCostScorer(cfg.kv),
  load: () => loadScorer,
  session: () => sessionScorer(),
  "decode-load": () => decodeLoadScorer,
  overlap: () => overlapScorer,
  "prefix-share": () => prefixShareScorer,
  queue: () => queueScorer(),
  "kv-utilization": () => kvUtilizationScorer,
  "no-hit-lru": () => noHitLruScorer(),
};

export const PICKERS: Record<PipelinePickerName, (cfg: RouterConfig) => Picker> = {
  softmax: (cfg) => softmaxPicker(cfg.kv.temperature),
  min: () => minPicker,
  lightest: () => lightestPicker,
  "power-of-two": () => powerOfTwoPicker,
  random: () => randomPicker,
  "round-robin": () => roundRobinPicker(),
  ring: (cfg) => ringPicker(cfg.session),
};

/**
 * A pipeline by stage names: what a preset declares and `router.pipeline` spells in YAML. The
 * filters' knobs default to `router.pipeline`'s.
 */
export interface PipelineSpec extends Partial<FilterKnobs> {
  filters: readonly PipelineFilterName[];
  scorers: readonly PipelineScorerConfig[];
  picker: PipelinePickerName;
}

/** Build the pipeline a spec describes. The config layer has validated every name. */
export function buildPipeline(spec: PipelineSpec, cfg: RouterConfig, source?: CacheSource): Pipeline {
  return {
    ...(source ? { source } : {}),
    filters: spec.filters.map((n) => FILTERS[n]({ overload: spec.overload ?? cfg.pipeline.overload, kv_headroom: spec.kv_headroom ?? cfg.pipeline.kv_headroom })),
    scorers: spec.scorers.map((s) => ({ scorer: SCORERS[s.type](cfg), weight: s.weight })),
    picker: PICKERS[spec.picker](cfg),
  };
}
