// The planner day's inputs and outputs (fleet-sim.ts re-exports them): a planner law, the day's
// spec and result, the day's engine, and one node of the fleet with its config.
import { defaultConfig } from "../../config/index.ts";
import type { Config } from "../../config/types.ts";
import { DEFAULT_COST } from "../../engine/sim/cost.ts";
import type { SchedulerConfig } from "../../engine/sim/scheduler.ts";
import type { AssignmentApplier } from "../../planner/assign.ts";
import type { ClusterPlanning } from "../../planner/cluster-plan.ts";
import type { PlannerService } from "../../planner/service.ts";
import type { Decision, Fleet, PlannerConfig, PlannerMemory, PoolSignals } from "../../planner/types.ts";
import type { RequestGate } from "../../request/gate.ts";
import type { RateShape } from "../../workload/rate-shapes.ts";
import type { SimScore } from "./score.ts";
import type { VirtualSupervisor } from "./virtual-supervisor.ts";

/** A planner under test: herd's decide() or an emulated rule, same inputs, same outputs. */
export interface PlannerLaw {
  name: string;
  decide(nowMs: number, timeOfDayS: number, signals: ReadonlyMap<string, PoolSignals & LawExtras>, fleet: Fleet, cfg: PlannerConfig, memory: PlannerMemory): Decision;
}

/** What the emulated anchors read besides herd's signals (concurrency and queue, as HPA/KPA see them). */
export interface LawExtras {
  /** Mean requests in flight per ready engine over the last tick. */
  concurrencyPerEngine: number;
  /** Requests waiting for an engine (held). */
  waiting: number;
}

export interface FleetSimSpec {
  shape: RateShape;
  durationS: number;
  seed: number;
  planner: PlannerConfig;
  law: PlannerLaw;
  hosts: { name: string; gpus: number }[];
  engine: SchedulerConfig;
  /** Cold start: median seconds and lognormal sigma (a long tail). */
  startMedianS: number;
  startSigma: number;
  wakeS: number;
  tickS: number;
  holdMax: number;
  holdTimeoutS: number;
  slo: { ttftS: number; itlS: number };
  /** Engines ready at t = 0 (before the first tick), spread over the hosts. */
  initialEngines: number;
  faults?: {
    /** A host dies at atS (engines and their requests lost); back empty at backAtS (null: never). */
    hostDown?: { host: string; atS: number; backAtS: number | null };
    /** From atS the leader stalls with its next start on the wire (mid-scale-up) for stallS, past the election timeout; resumed, it sends it and believes it leads for deposedS. */
    failover?: { atS: number; stallS: number; deposedS: number };
  };
}

export interface FleetSimResult extends SimScore {
  mean_in_flight: number;
  actions: string[];
  /** Assignments the nodes refused (stale term, unknown term, no lease): the fence at work. */
  refused: number;
  /** Starts applied that were decided without seeing an engine another term started that was still coming. */
  double_starts: number;
  /** Assignment ids seen twice (suppressed). */
  duplicates: number;
  /** `time leader term` at every leadership change. */
  leaders: string[];
}

/**
 * The day's engine: the sim engine's scheduler with its H100 figures (src/engine/sim/README.md:
 * 395k tokens of KV, 8192 batched tokens, Qwen3-8B's 40,960 context) and max_num_seqs 256, in
 * 128-token blocks (vLLM's largest CUDA block size; 3,087 × 128 = 395,136 tokens): a rate-shape
 * trace shares no prefix, so the block size only sets the cost of the prefix cache's bookkeeping
 * (an 8k prompt is 63 blocks, not 500; same GPU-s and SLO on a peak-rate probe with 16).
 * No one reads its KV events (the router here is least-loaded), so none are built; quiet steps are
 * fast-forwarded (same results, test/engine/sim/fast-forward.test.ts).
 */
export const DEFAULT_ENGINE: SchedulerConfig = {
  blockSize: 128, numBlocks: 3_087, maxNumSeqs: 256, maxNumBatchedTokens: 8192, maxWaiting: 65_536, maxModelLen: 40_960,
  cost: DEFAULT_COST, timeScale: 1, hashSeed: 0n, kvEvents: false, fastForward: true,
};

export interface SimNode {
  name: string;
  gpus: number;
  sup: VirtualSupervisor;
  planner: PlannerService;
  applier: AssignmentApplier;
  cluster: ClusterPlanning;
  gate: RequestGate;
  /** This node's view of the election. */
  lease: { term: number; leader: string } | null;
  up: boolean;
  stalled: boolean;
  /** A node that comes back is a new planner instance: its totals start again. */
  epoch: string;
  /** Its lease was renewed through quorum contact lately (false after a stall until it hears the cluster again). */
  leaseFresh: boolean;
}

/** The sim's config for one node: one sim engine entry (count 0: the planner starts them), its planner section. */
export function nodeConfig(spec: FleetSimSpec, name: string): Config {
  const base = defaultConfig();
  const pool = spec.planner.pools[0]!;
  return {
    ...base,
    node: { ...base.node, name },
    engines: [{ kind: "sim", model: pool.model, count: 0, role: pool.role, gpus: [], host: "127.0.0.1", port: 0, args: [], env: {}, command: [], url: "", kv_events: null, health_path: "/health", gpu_memory_utilization: 0, share_gpu: false }],
    planner: {
      ...base.planner, enabled: true, dry_run: false, tick_ms: spec.tickS * 1000, hold_max: spec.holdMax, hold_max_bytes: spec.holdMax * 1_000_000, hold_timeout_ms: spec.holdTimeoutS * 1000,
      pools: [{ engine: 0, min: pool.min, max: pool.max, prefill_tokens_per_s: pool.capacity.prefillTokensPerS, decode_tokens_per_s: pool.capacity.decodeTokensPerS, can_sleep: pool.canSleep, floors: [], pin: -1 }],
    },
  };
}
