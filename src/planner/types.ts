// The planner's contract: what it reads (signals per pool, the fleet, config, its own memory) and
// what it returns (actions with a reason per pool). Everything is plain data so `decide()` stays
// pure and a seeded simulation can replay a day of decisions exactly.
import type { Role } from "../config/types.ts";
import type { EngineFigures } from "./capacity.ts";
import type { SlaMemory } from "./sla.ts";

/** A pool: engines of one model and role (and engine config) that scale together. */
export interface PoolSpec {
  /** `model/role`, e.g. `qwen3-8b/decode`. */
  id: string;
  model: string;
  role: Role;
  min: number;
  max: number;
  gpusPerEngine: number;
  /** One engine's sustainable throughput at the SLO (from `herd bench` / `simulate --calibrate`). */
  capacity: { prefillTokensPerS: number; decodeTokensPerS: number };
  /**
   * Pooling gain: n engines behind the router serve more than n × one engine at the same SLO
   * (queueing: a burst spreads). `factor` is the per-engine gain measured at `engines` engines; the
   * gain at other counts follows factor^(ln n / ln engines). Null: no gain assumed.
   */
  poolingGain?: { engines: number; factor: number } | null;
  /** Engines of this pool can sleep (vLLM sleep mode): wake in seconds instead of a cold start. */
  canSleep: boolean;
  /** Time-of-day floors (seconds since local midnight): at least `min` engines in [fromS, toS). */
  floors: readonly { fromS: number; toS: number; min: number }[];
  /** An operator's pin: exactly this many engines (an input, never fought). */
  pinned: number | null;
  /** SLA mode: one engine's step cost and limits for the capacity model (capacity.ts); absent = the sim engine's defaults. */
  engine?: EngineFigures;
}

/** SLA mode (planner.slo): pools sized from the capacity model at these targets and the predicted load (sla.ts). */
export interface SloSpec {
  /** Mean time to first token to plan for (ms). */
  ttftMs: number;
  /** Mean inter-token latency to plan for (ms). */
  itlMs: number;
  /** Forecast the load this far ahead: what a new engine will serve once it is up (ms). */
  horizonMs: number;
  /** Weight of a new measured/expected sample in a correction factor; 0 = no online refinement. */
  correctionEwma: number;
  /** A correction factor stays within [1/max, max]. */
  correctionMax: number;
}

export interface PlannerConfig {
  /** Target utilisation of an engine's capacity when scaling up (0..1). */
  utilizationTarget: number;
  /** Scale down only when one fewer engine stays under this share of the target (hysteresis). */
  downHeadroom: number;
  stableWindowMs: number;
  panicWindowMs: number;
  /** Demand must allow one fewer engine for this long before one is removed. */
  downWindowMs: number;
  /** At most one removal per pool per this interval. */
  downStepMs: number;
  /** No removal this soon after an addition (cache warm-up). */
  upHoldMs: number;
  /** Idle (no arrivals, nothing in flight or held) this long → sleep (or stop). */
  idleToSleepMs: number;
  /** Asleep this long → stop (frees host RAM). */
  sleepToStopMs: number;
  /** GPUs the planner may use across the cluster (null = every host's GPUs). */
  gpuBudget: number | null;
  pools: readonly PoolSpec[];
  /** SLA mode: size pools for these latency targets (sla.ts) instead of the capacity figures × utilisation. */
  slo?: SloSpec | null;
}

export type EngineState = "starting" | "ready" | "draining" | "sleeping" | "waking" | "stopped";

export interface FleetEngine {
  id: string;
  pool: string;
  host: string;
  state: EngineState;
  /** Requests in flight on it (herd's own count). */
  inFlight: number;
  /** KV transfers it still owes (a prefill engine whose decode has not pulled yet). */
  pendingTransfers: number;
  gpus: number;
  /** Clock ms of its last state change. */
  sinceMs: number;
}

export interface FleetHost {
  name: string;
  gpusTotal: number;
  /** GPUs held by engines of any state but stopped are not free. */
  gpusFree: number;
  /** Failed starts back off per host: no start here before this time (clock ms). */
  backoffUntilMs: number;
  /** Pools this host can start (its engines[] entries: the templates); absent = any. */
  pools?: readonly string[];
}

export interface Fleet {
  engines: readonly FleetEngine[];
  hosts: readonly FleetHost[];
}

/** What herd's data path saw for a pool since the last tick (rates per second; NaN = unknown). */
export interface PoolSignals {
  arrivalsPerS: number;
  /** Prompt tokens per second that must be computed (after the index's cache-hit estimate). */
  uncachedPrefillTokensPerS: number;
  decodeTokensPerS: number;
  /** Requests herd holds for this pool (waiting for an engine) and their prompt tokens. */
  heldRequests: number;
  heldTokens: number;
  /** Mean TTFT and ITL (ms) of the pool's requests finished in the window (SLA mode's correction); NaN or absent = none. */
  ttftMsMean?: number;
  itlMsMean?: number;
  /** How many finished requests those means are over (a window of few weighs less in the correction). */
  latencySamples?: number;
}

export type Reason =
  | "hold"
  | "scale_up"
  | "scale_up_pending"
  | "scale_down"
  | "drain_wait"
  | "wake"
  | "sleep_idle"
  | "stop_idle"
  | "no_signal"
  | "new_leader_window"
  | "up_hold"
  | "at_max"
  | "gpu_budget"
  | "pinned"
  | "floor";

export type Action =
  | { kind: "start"; pool: string; host: string }
  | { kind: "wake"; pool: string; engine: string }
  | { kind: "drain"; pool: string; engine: string }
  | { kind: "stop"; pool: string; engine: string }
  | { kind: "sleep"; pool: string; engine: string };

export interface PoolDecision {
  pool: string;
  /** Engines the pool should have serving (ready + coming). */
  desired: number;
  /** Engines counted now: ready + starting + waking (+ draining ones that still serve). */
  current: number;
  reason: Reason;
  /** The figures the decision read, for `herd planner status` and explain. */
  terms: Record<string, number | null>;
  /** SLA mode: the sizing term by term (predicted load, one engine's capacity at the target, correction, result). */
  explain?: string;
}

/** What decide() remembers between ticks (returned anew; never mutated in place). */
export interface PoolMemory {
  /** (time, demanded engines) samples, oldest first, trimmed to the longest window. */
  samples: readonly { atMs: number; need: number }[];
  /** The stable-window mean at each tick: scale-down reads its maximum (smoothed, not raw noise). */
  stableSamples?: readonly { atMs: number; need: number }[];
  /** When sampling began (null before the first sample): a window is covered once it is that old. */
  samplingSinceMs: number | null;
  lastUpMs: number | null;
  lastDownMs: number | null;
  /** Since when the pool has been idle (null = not idle). */
  idleSinceMs: number | null;
  /** SLA mode: the load predictors and correction factors. */
  sla?: SlaMemory;
}

export interface PlannerMemory {
  /** When this leader started deciding: no scale-down before a down window has passed. */
  leaderSinceMs: number;
  pools: Readonly<Record<string, PoolMemory>>;
}

export interface Decision {
  actions: Action[];
  pools: PoolDecision[];
  memory: PlannerMemory;
}
