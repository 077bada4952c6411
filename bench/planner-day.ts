// Planner simulation speed and the day's table: `comparePlanners` (src/planner/sim/compare.ts) on
// the default diurnal day for herd and static peak provisioning, as `herd simulate --planner
// herd,static` runs it. Prints the table, then wall seconds per simulated day for each planner and
// herd's as a ratio against the static run measured in the same process (the baseline: same trace,
// same engine model, a planner that never acts), plus the calibration and peak search that come
// before them. Figures only, nothing asserted (the target: a day in ≤ 60 s of wall time).
// Usage: bun bench/planner-day.ts [--duration S] [--seed K] [--gpus N] [--tick-s S] [--workload SHAPE]
import { comparePlanners, type CompareOptions } from "../src/planner/sim/compare.ts";
import { renderPlannerTable } from "../src/simulate/planner-cli.ts";

const argv = process.argv.slice(2);
const flag = (name: string, def: string) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1]! : def;
};
const duration = flag("duration", "");
const o: CompareOptions = {
  planners: ["static", "herd"],
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
