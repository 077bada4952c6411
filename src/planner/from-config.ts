// The planner's PlannerConfig (types.ts) from the node's `planner` config section: windows and
// thresholds as they are, one PoolSpec per pool (id `model/role` of its engines[] entry), floors
// parsed from `HH:MM-HH:MM=N`, pin -1 → none, gpu_budget 0 → the hosts' GPUs. With planner.slo (SLA
// mode) each pool also gets the capacity model's engine: the step cost of planner.slo.profile (a
// `herd simulate --calibrate --save` file), else a sim entry's own flags (its cost, step budget,
// sequence limit, KV blocks, time scale), else the built-in figures (capacity.ts DEFAULT_FIGURES).
import { readFileSync } from "node:fs";
import { parseFloor } from "../config/planner-checks.ts";
import type { Config, EngineConfig } from "../config/types.ts";
import type { CostParams } from "../engine/sim/cost.ts";
import { driverFor } from "../engine/drivers/registry.ts";
import { DEFAULT_FIGURES, type EngineFigures } from "./capacity.ts";
import type { PlannerConfig, PoolSpec, SloSpec } from "./types.ts";

export function plannerConfigFrom(config: Config, gpusPerEngine: (entryIndex: number) => number): PlannerConfig {
  const p = config.planner;
  const profile = p.slo && p.slo.profile !== "" ? loadProfile(p.slo.profile) : null;
  const pools: PoolSpec[] = p.pools.map((pool) => {
    const entry = config.engines[pool.engine]!;
    return {
      id: `${entry.model}/${entry.role}`, model: entry.model, role: entry.role, min: pool.min, max: pool.max, gpusPerEngine: gpusPerEngine(pool.engine),
      capacity: { prefillTokensPerS: pool.prefill_tokens_per_s, decodeTokensPerS: pool.decode_tokens_per_s }, poolingGain: null, canSleep: pool.can_sleep,
      floors: pool.floors.map(parseFloor).filter((f) => f !== null), pinned: pool.pin >= 0 ? pool.pin : null,
      ...(p.slo ? { engine: engineFigures(entry, profile) } : {}),
    };
  });
  const slo: SloSpec | null = p.slo
    ? { ttftMs: p.slo.ttft_ms, itlMs: p.slo.itl_ms, horizonMs: p.slo.horizon_ms, correctionEwma: p.slo.correction_ewma, correctionMax: p.slo.correction_max }
    : null;
  return {
    utilizationTarget: p.utilization_target, downHeadroom: p.down_headroom, stableWindowMs: p.stable_window_ms, panicWindowMs: p.panic_window_ms,
    downWindowMs: p.down_window_ms, downStepMs: p.down_step_ms, upHoldMs: p.up_hold_ms, idleToSleepMs: p.idle_to_sleep_ms, sleepToStopMs: p.sleep_to_stop_ms,
    gpuBudget: p.gpu_budget > 0 ? p.gpu_budget : null, pools, slo,
  };
}

const COST_KEYS = ["stepMs", "weightsMs", "linearMsPerToken", "pairMs", "kvReadMsPerToken", "requestMs"] as const;

/** The `cost` figures of a `herd simulate --calibrate --save` file; throws with the key path when it has none. */
export function loadProfile(file: string): Partial<CostParams> {
  let v: { cost?: Record<string, unknown> };
  try {
    v = JSON.parse(readFileSync(file, "utf8")) as typeof v;
  } catch (e) {
    throw new Error(`planner.slo.profile: cannot read ${file}: ${e instanceof Error ? e.message : String(e)}`);
  }
  const out: Partial<CostParams> = {};
  for (const k of COST_KEYS) {
    const x = v?.cost?.[k];
    if (typeof x === "number" && Number.isFinite(x) && x >= 0) out[k] = x;
  }
  if (Object.keys(out).length === 0) throw new Error(`planner.slo.profile: ${file} has no "cost" figures (write one with herd simulate --calibrate FILE --save ${file})`);
  return out;
}

/** The capacity model's engine for one engines[] entry (see the header). */
export function engineFigures(entry: EngineConfig, profile: Partial<CostParams> | null): EngineFigures {
  let f: EngineFigures = DEFAULT_FIGURES;
  try {
    f = driverFor(entry.kind).stepCostOfArgs?.(entry.args) ?? DEFAULT_FIGURES;
  } catch {
    // Bad engine flags fail the engine's own start, loudly; the planner keeps the built-in figures.
  }
  return profile ? { ...f, cost: { ...f.cost, ...profile } } : f;
}
