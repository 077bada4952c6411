// Planner simulation speed and the day's table: `comparePlanners` (src/simulate/planner-day/compare.ts) on
// the default diurnal day for herd, herd in SLA mode (herd-sla) and static peak provisioning, as `herd simulate --planner
// herd,static` runs it. Prints the table, then wall seconds per simulated day for each planner and
// herd's as a ratio against the static run measured in the same process (the baseline: same trace,
// same engine model, a planner that never acts), plus the calibration and peak search that come
// before them. Figures only, nothing asserted (the target: a day in ≤ 60 s of wall time).
// Then the multi-host day (issue 20): 4 hosts × 4 GPUs, one node per host running the real
// PlannerService, the leader planning for the cluster through fenced assignments; host h2 dies at
// 10:00 and is back (empty) at 12:00, the leader stalls at 14:00 (rising load) past the election
// timeout with its next start on the wire (mid-scale-up), resumes, sends it and believes it leads
// for 30 s; every planner on the same trace and faults, plus the assignments the nodes refused (the
// fence at work) and the double starts (a start decided without seeing an engine another term
// started that was still coming).
// Usage: bun bench/planner-day.ts [--duration S] [--seed K] [--gpus N] [--tick-s S] [--workload SHAPE] [--fleet-only] [--no-fleet]
import { comparePlanners, type CompareOptions } from "../src/simulate/planner-day/compare.ts";
import { renderPlannerTable } from "../src/simulate/planner-cli.ts";
import { EMULATED_LAWS } from "../src/simulate/planner-day/laws.ts";

const argv = process.argv.slice(2);
const flag = (name: string, def: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1]! : def;
};
const duration = flag("duration", "");
const o: CompareOptions = {
  planners: ["static", "herd", "herd-sla"],
  // The default day of `herd simulate --planner` (src/simulate/planner-cli.ts DEFAULT_SHAPE).
  shape: flag("workload", "diurnal:peak=20,trough=1,isl=8000,osl=256"),
  durationS: duration === "" ? null : Number(duration),
  seed: Number(flag("seed", "1")),
  gpus: Number(flag("gpus", "16")),
  sloTtftS: 1,
  sloItlS: 0.05,
  staticTarget: 0.99,
  tickS: Number(flag("tick-s", "10")),
};

const fleetOnly = argv.includes("--fleet-only");
if (!fleetOnly) await singleDay();
if (!argv.includes("--no-fleet")) await fleetDay();

async function singleDay(): Promise<void> {
const t0 = performance.now();
const r = await comparePlanners(o);
const totalS = (performance.now() - t0) / 1000;
const days = r.duration_s / 86_400;
const perDay = (name: string) => r.planners[name]!.wall_s / days;
const runsS = Object.values(r.planners).reduce((n, p) => n + p.wall_s, 0);

console.log(renderPlannerTable(r));
console.log("");
console.log(`simulated: ${r.duration_s} s (${days.toFixed(3)} day), ${o.gpus} GPUs, static peak ${r.static_engines} engines, engine capacity ${r.engine_capacity_rps} req/s`);
console.log("planner   wall s   wall s per simulated day   ratio vs static (same run)");
for (const name of Object.keys(r.planners)) {
  const ratio = perDay(name) / perDay("static");
  console.log(`${name.padEnd(8)}  ${r.planners[name]!.wall_s.toFixed(2).padStart(6)}   ${perDay(name).toFixed(2).padStart(24)}   ${ratio.toFixed(2).padStart(26)}`);
}
console.log(`calibration + static peak search: ${(totalS - runsS).toFixed(2)} s; whole run ${totalS.toFixed(2)} s`);
const herd = r.planners.herd!;
const stat = r.planners.static!;
console.log(
  `herd vs static: GPU-seconds ${((1 - herd.gpu_seconds / stat.gpu_seconds) * 100).toFixed(1)}% fewer, SLO attainment ${((herd.slo_attainment - stat.slo_attainment) * 100).toFixed(2)} points`,
);
// SLA mode (planner.slo, src/planner/sla.ts): the same decide() sized from the capacity model at mean targets.
const sla = r.planners["herd-sla"];
if (sla) console.log(`herd-sla vs herd: GPU-seconds ${((1 - sla.gpu_seconds / herd.gpu_seconds) * 100).toFixed(1)}% fewer, SLO attainment ${((sla.slo_attainment - herd.slo_attainment) * 100).toFixed(2)} points, scale events ${sla.scale_events} vs ${herd.scale_events}`);
}

async function fleetDay(): Promise<void> {
  const scale = (o.durationS ?? 86_400) / 86_400; // a shorter --duration compresses the fault times with it
  const f: CompareOptions = {
    ...o, planners: ["static", "herd", ...EMULATED_LAWS], gpus: 16, hostGpus: 4,
    faults: { hostDown: { host: "h2", atS: 36_000 * scale, backAtS: 43_200 * scale }, failover: { atS: 50_400 * scale, stallS: 20, deposedS: 30 } },
  };
  const t0 = performance.now();
  const r = await comparePlanners(f);
  console.log("");
  console.log("multi-host day: 4 hosts × 4 GPUs; h2 down 10:00–12:00; leader stalls mid-scale-up after 14:00 (20 s), deposed for 30 s after");
  console.log(renderPlannerTable(r));
  console.log("planner        refused  double starts  duplicate ids  leaders (time s, node, term)");
  for (const [name, p] of Object.entries(r.planners)) console.log(`${name.padEnd(13)}  ${String(p.refused).padStart(7)}  ${String(p.double_starts).padStart(13)}  ${String(p.duplicates).padStart(13)}  ${p.leaders.join("; ")}`);
  const herd = r.planners.herd!;
  const stat = r.planners.static!;
  console.log(`herd vs static: GPU-seconds ${((1 - herd.gpu_seconds / stat.gpu_seconds) * 100).toFixed(1)}% fewer, SLO attainment ${((herd.slo_attainment - stat.slo_attainment) * 100).toFixed(2)} points; whole run ${((performance.now() - t0) / 1000).toFixed(1)} s`);
}
