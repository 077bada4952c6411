// A policy is a preset: a pipeline spec by stage names (../pipeline/registry.ts), plus, for the
// policies that read the prompt's cache, the source of overlap. `preset()` turns one into the
// PolicyFactory the registry lists; every preset runs in the one PipelinePolicy runner.
import type { RouterConfig } from "../../config/types.ts";
import { buildPipeline, type PipelineSpec } from "../pipeline/registry.ts";
import { PipelinePolicy } from "../pipeline/runner.ts";
import type { CacheSource } from "../pipeline/types.ts";
import type { PolicyDeps, PolicyFactory } from "../types.ts";

export interface Preset {
  /** The name `router.policy` uses (listed in POLICIES, src/config/types.ts). */
  readonly name: string;
  /** The stages, by name; `kv`/`prefix` return `cfg.pipeline`, so YAML can recompose them. */
  spec(cfg: RouterConfig): PipelineSpec;
  /** Where overlap comes from (the stage that reads block hashes first); absent = none. */
  source?(cfg: RouterConfig, deps: PolicyDeps): CacheSource;
}

/** The factory keeps its preset's literal name, so the registry's record can check key = name. */
export function preset<N extends string>(p: Preset & { readonly name: N }): PolicyFactory & { readonly name: N; readonly preset: Preset } {
  return {
    name: p.name,
    preset: p,
    create(cfg, deps = {}) {
      return new PipelinePolicy(p.name, buildPipeline(p.spec(cfg), cfg, p.source?.(cfg, deps)), deps.load);
    },
  };
}
