// `herd simulate --planner herd,static,…`: the same seeded trace through each planner, one row each.
// `static` is peak provisioning: the smallest fixed engine count that meets the SLO target at the
// trace's peak rate (held constant for `probeS`), found by a linear search over counts, running all day.
import { parseRateShape, type RateShape } from "../../workload/rate-shapes.ts";
import type { PlannerConfig, PoolSpec } from "../../planner/types.ts";
import { DEFAULT_ENGINE, runFleetSim, type FleetSimSpec, type PlannerLaw } from "./fleet-sim.ts";
import { EMULATED_LAWS, HERD, HERD_SLA, emulatedLaw, staticLaw } from "./laws.ts";
import type { SimScore } from "./score.ts";

export const PLANNER_NAMES = ["herd", "herd-sla", "static", ...EMULATED_LAWS];

/**
 * herd-sla's mean targets as a share of the per-request SLO the day is scored on: SLA mode plans
 * for mean TTFT and ITL (as Dynamo's SLA planner), and a mean at the SLO would leave half the
 * requests past it.
 */
export const SLA_TARGET_SHARE = 0.5;

export interface CompareOptions {
  planners: string[];
  shape: string;
  durationS: number | null;
  seed: number;
  gpus: number;
  sloTtftS: number;
  sloItlS: number;
  /** SLO attainment static provisioning must reach at the peak rate. */
  staticTarget: number;
  tickS: number;
  /** GPUs per host (the fleet is ceil(gpus / hostGpus) hosts); default 8. */
  hostGpus?: number;
  /** Faults during the compared runs (not the calibration): a host dying, a leader failover. */
  faults?: FleetSimSpec["faults"];
  /** herd-sla's mean targets (ms); default SLA_TARGET_SHARE × the SLO. */
  slaTtftMs?: number;
  slaItlMs?: number;
}

/** The spec with SLA mode on: planner.slo at the targets, the capacity model on the day's engine model. */
export function withSla(spec: FleetSimSpec, o: CompareOptions): FleetSimSpec {
  const slo = { ttftMs: o.slaTtftMs ?? o.sloTtftS * 1000 * SLA_TARGET_SHARE, itlMs: o.slaItlMs ?? o.sloItlS * 1000 * SLA_TARGET_SHARE, horizonMs: 60_000, correctionEwma: 0.2, correctionMax: 3 };
  const e = spec.engine;
  const engine = { cost: e.cost, maxNumBatchedTokens: e.maxNumBatchedTokens, maxNumSeqs: e.maxNumSeqs, kvTokens: e.numBlocks * e.blockSize };
  return { ...spec, planner: { ...spec.planner, slo, pools: spec.planner.pools.map((p) => ({ ...p, engine })) } };
}

/** One planner's row: the score, the fence's refusals and double starts across faults, wall time. */
export type PlannerRow = SimScore & { wall_s: number; refused: number; double_starts: number; duplicates: number; leaders: string[] };

export const DEFAULT_POOL: PoolSpec = {
  id: "herd-sim/aggregated", model: "herd-sim", role: "aggregated", min: 0, max: 16, gpusPerEngine: 1,
  // One simulated H100 (src/engine/sim/cost.ts): ~40k prefill tokens/s, ~3k decode tokens/s at a
  // 50 ms ITL-friendly batch. Seeds the capacity model the issue asks to refine online.
  capacity: { prefillTokensPerS: 40_000, decodeTokensPerS: 3_000 }, canSleep: true, floors: [], pinned: null,
};

export const DEFAULT_PLANNER: PlannerConfig = {
  // The capacity is calibrated at the SLO (the highest rate one engine serves within it at 99%,
  // scaled by the pool's measured gain); the target runs 10% above it because a request-weighted
  // day spends most requests near the peak, where the pool's own gain is largest.
  utilizationTarget: 1.1, downHeadroom: 0.95, stableWindowMs: 60_000, panicWindowMs: 6_000, downWindowMs: 300_000, downStepMs: 120_000,
  upHoldMs: 30_000, idleToSleepMs: 300_000, sleepToStopMs: 1_800_000, gpuBudget: null, pools: [DEFAULT_POOL],
};

export function specFor(shape: RateShape, law: PlannerLaw, o: CompareOptions, durationS: number, initial = 0, capacity = DEFAULT_POOL.capacity, poolingGain: PoolSpec["poolingGain"] = null): FleetSimSpec {
  const pool = { ...DEFAULT_POOL, max: o.gpus, capacity, poolingGain };
  return {
    shape, durationS, seed: o.seed, law, planner: { ...DEFAULT_PLANNER, gpuBudget: o.gpus, pools: [pool] },
    hosts: hostsFor(o.gpus, o.hostGpus ?? 8),
    engine: DEFAULT_ENGINE, startMedianS: 45, startSigma: 0.35, wakeS: 3, tickS: o.tickS, holdMax: 1024, holdTimeoutS: 300,
    slo: { ttftS: o.sloTtftS, itlS: o.sloItlS }, initialEngines: initial,
  };
}

export function hostsFor(gpus: number, perHost: number): { name: string; gpus: number }[] {
  return Array.from({ length: Math.ceil(gpus / perHost) }, (_, i) => ({ name: `h${i}`, gpus: Math.min(perHost, gpus - perHost * i) }));
}

/**
 * One engine's capacity for the trace's request mix: the highest constant rate at which a single
 * engine meets the SLO target (bisection over `probeS`-second runs), as the planner's capacity model
 * (what `herd simulate --calibrate` / `herd bench` seed in production). An aggregated engine does
 * both phases, so each phase is credited with half: demand = prefill/cap_p + decode/cap_d = λ / r*.
 */
export async function calibrateCapacity(shape: RateShape, o: CompareOptions, probeS = 300): Promise<{ prefillTokensPerS: number; decodeTokensPerS: number; ratePerS: number; concurrency: number }> {
  let concurrency = 1;
  const meets = async (r: number) => {
    const flat: RateShape = { ...shape, rateAt: () => r, peak: r * 1.01, name: `${shape.name}@${r}` };
    const res = await runFleetSim(specFor(flat, staticLaw(1), o, probeS, 1));
    if (res.slo_attainment >= o.staticTarget) concurrency = Math.max(1, res.mean_in_flight);
    return res.slo_attainment >= o.staticTarget;
  };
  let lo = 0;
  let hi = 1;
  while ((await meets(hi)) && hi < 1024) [lo, hi] = [hi, hi * 2];
  for (let i = 0; i < 8; i++) {
    const mid = (lo + hi) / 2;
    if (await meets(mid)) lo = mid;
    else hi = mid;
  }
  const r = Math.max(lo, 1e-3);
  return { prefillTokensPerS: 2 * r * shape.isl, decodeTokensPerS: 2 * r * shape.osl, ratePerS: r, concurrency };
}

/** The smallest static engine count meeting the target at the peak rate. */
export async function staticPeakCount(shape: RateShape, o: CompareOptions, probeS = 600): Promise<number> {
  const flat: RateShape = { ...shape, rateAt: () => shape.peak / 1.01, name: `${shape.name}@peak` };
  for (let n = 1; n <= o.gpus; n++) {
    const r = await runFleetSim(specFor(flat, staticLaw(n), o, probeS, n));
    if (r.slo_attainment >= o.staticTarget) return n;
  }
  return o.gpus;
}

export async function comparePlanners(o: CompareOptions): Promise<{ shape: string; duration_s: number; seed: number; static_engines: number | null; engine_capacity_rps: number; target_concurrency: number; planners: Record<string, PlannerRow> }> {
  const shape = parseRateShape(o.shape);
  const durationS = o.durationS ?? shape.durationS;
  const out: Record<string, PlannerRow> = {};
  let staticN: number | null = null;
  const cal = await calibrateCapacity(shape, o);
  const capacity = { prefillTokensPerS: cal.prefillTokensPerS, decodeTokensPerS: cal.decodeTokensPerS };
  // The pooling gain from the same measurements: one engine's rate vs the peak pool's per-engine rate.
  const peakN = await staticPeakCount(shape, o);
  const gain = peakN > 1 ? { engines: peakN, factor: Math.max(1, shape.peak / 1.01 / peakN / cal.ratePerS) } : null;
  for (const name of o.planners) {
    const t0 = performance.now();
    // The concurrency rules get the requests one engine holds at its SLO capacity as their target.
    let law: PlannerLaw | null = name === "herd" ? HERD : name === "herd-sla" ? HERD_SLA : emulatedLaw(name, cal.concurrency);
    // Every planner starts the trace with one engine up; static with its peak count.
    let initial = 1;
    if (name === "static") {
      staticN = peakN;
      law = staticLaw(staticN);
      initial = staticN;
    }
    if (!law) throw new Error(`unknown planner ${JSON.stringify(name)} (one of ${PLANNER_NAMES.join(", ")})`);
    const spec = specFor(shape, law, o, durationS, initial, capacity, gain);
    const r = await runFleetSim({ ...(name === "herd-sla" ? withSla(spec, o) : spec), ...(o.faults ? { faults: o.faults } : {}) });
    const { actions: _log, ...score } = r;
    out[name] = { ...score, wall_s: Math.round((performance.now() - t0) / 10) / 100 };
  }
  return { shape: o.shape, duration_s: durationS, seed: o.seed, static_engines: staticN, engine_capacity_rps: Math.round(cal.ratePerS * 1000) / 1000, target_concurrency: Math.round(cal.concurrency * 100) / 100, planners: out };
}
