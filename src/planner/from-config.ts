// The planner's PlannerConfig (types.ts) from the node's `planner` config section: windows and
// thresholds as they are, one PoolSpec per pool (id `model/role` of its engines[] entry), floors
// parsed from `HH:MM-HH:MM=N`, pin -1 → none, gpu_budget 0 → the hosts' GPUs.
import { parseFloor } from "../config/planner-checks.ts";
import type { Config } from "../config/types.ts";
import type { PlannerConfig, PoolSpec } from "./types.ts";

export function plannerConfigFrom(config: Config, gpusPerEngine: (entryIndex: number) => number): PlannerConfig {
  const p = config.planner;
  const pools: PoolSpec[] = p.pools.map((pool) => {
    const entry = config.engines[pool.engine]!;
    return {
      id: `${entry.model}/${entry.role}`, model: entry.model, role: entry.role, min: pool.min, max: pool.max, gpusPerEngine: gpusPerEngine(pool.engine),
      capacity: { prefillTokensPerS: pool.prefill_tokens_per_s, decodeTokensPerS: pool.decode_tokens_per_s }, poolingGain: null, canSleep: pool.can_sleep,
      floors: pool.floors.map(parseFloor).filter((f) => f !== null), pinned: pool.pin >= 0 ? pool.pin : null,
    };
  });
  return {
    utilizationTarget: p.utilization_target, downHeadroom: p.down_headroom, stableWindowMs: p.stable_window_ms, panicWindowMs: p.panic_window_ms,
    downWindowMs: p.down_window_ms, downStepMs: p.down_step_ms, upHoldMs: p.up_hold_ms, idleToSleepMs: p.idle_to_sleep_ms, sleepToStopMs: p.sleep_to_stop_ms,
    gpuBudget: p.gpu_budget > 0 ? p.gpu_budget : null, pools,
  };
}
