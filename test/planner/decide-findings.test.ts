// Findings about decide()'s rules from the planner's shell, kept as regression tests once fixed.
import { expect, test } from "bun:test";
import { decide, initialMemory } from "../../src/planner/decide.ts";
import type { Fleet, PlannerConfig, PoolSignals, PoolSpec } from "../../src/planner/types.ts";

const POOL: PoolSpec = {
  id: "m/aggregated", model: "m", role: "aggregated", min: 0, max: 4, gpusPerEngine: 0,
  capacity: { prefillTokensPerS: 1_000, decodeTokensPerS: 100 }, canSleep: true, floors: [], pinned: null,
};
const ZERO: PoolSignals = { arrivalsPerS: 0, uncachedPrefillTokensPerS: 0, decodeTokensPerS: 0, heldRequests: 0, heldTokens: 0 };

// An idle pool that can sleep should sleep, then stop (issue 15: "an idle pool sleeps, then stops").
// With down_window_ms shorter than idle_to_sleep_ms, the ordinary scale-down (N → N−1 once the down
// window shows demand 0) drains and stops the last engine first, so a can_sleep pool never sleeps
// and the next request pays a cold start instead of a wake. (config/planner-checks.ts warns.)
test("a can_sleep pool with a down window shorter than the idle bound sleeps its last engine instead of draining it", () => {
  const cfg: PlannerConfig = {
    utilizationTarget: 1, downHeadroom: 0.9, stableWindowMs: 5_000, panicWindowMs: 2_000, downWindowMs: 10_000, downStepMs: 5_000,
    upHoldMs: 5_000, idleToSleepMs: 15_000, sleepToStopMs: 30_000, gpuBudget: null, pools: [POOL],
  };
  let memory = initialMemory(0);
  const kinds: string[] = [];
  let state: "ready" | "draining" | "sleeping" = "ready";
  for (let now = 1_000; now <= 20_000; now += 1_000) {
    const fleet: Fleet = { engines: [{ id: "e0", pool: POOL.id, host: "h", state, inFlight: 0, pendingTransfers: 0, gpus: 0, sinceMs: 0 }], hosts: [{ name: "h", gpusTotal: 0, gpusFree: 0, backoffUntilMs: 0 }] };
    const d = decide(now, 0, new Map([[POOL.id, ZERO]]), fleet, cfg, memory);
    memory = d.memory;
    for (const a of d.actions) {
      kinds.push(a.kind);
      if (a.kind === "drain") state = "draining";
      if (a.kind === "sleep") state = "sleeping";
    }
    if (state !== "ready") break;
  }
  expect(kinds[0]).toBe("sleep");
});
