// `herd simulate --planner herd,static[,…] --workload diurnal[:peak=R,trough=R,period=S]`: the same
// seeded trace through each planner on the virtual clock (src/simulate/planner-day), one row each:
// GPU-seconds, SLO attainment, scale events, flaps, held-request wait p99, dropped requests.
import { writeFileSync } from "node:fs";
import { BenchInputError } from "../workload/plan.ts";
import { RATE_SHAPES } from "../workload/rate-shapes.ts";
import { PLANNER_NAMES, comparePlanners, type CompareOptions } from "./planner-day/compare.ts";
import type { SimIo } from "./cli.ts";

export const PLANNER_HELP = `herd simulate --planner: compare scaling planners on a load that changes over time

Usage: herd simulate --planner P[,P…] [--workload SHAPE[:k=v,…]] [--duration S] [--seed K]
                     [--gpus N] [--slo ttft=1s,itl=50ms] [--static-target X] [--json FILE]

Options:
  --planner LIST     ${PLANNER_NAMES.join(", ")}
  --workload SHAPE   ${RATE_SHAPES.join(", ")} (default diurnal), e.g. diurnal:peak=20,trough=1,period=86400
  --duration S       seconds of load (default: the shape's own, a day for diurnal)
  --gpus N           GPUs (one engine each) the planners may use (default 16)
  --slo LIST         per-request SLO: ttft and mean inter-token latency (default ttft=1s,itl=50ms)
  --static-target X  SLO attainment static provisioning must reach at the peak rate (default 0.99)
  --tick-s S         planner interval (default 10)
  --json FILE        write {"planners": {name: {gpu_seconds, slo_attainment, …}}, …}`;

const DEFAULT_SHAPE = "diurnal:peak=20,trough=1,isl=8000,osl=256";

export function isPlannerRun(argv: readonly string[]): boolean {
  return argv.some((a) => a === "--planner" || a.startsWith("--planner="));
}

export async function plannerMain(argv: readonly string[], io: SimIo): Promise<number> {
  const flags = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === "--help" || a === "-h") {
      io.out(PLANNER_HELP);
      return 0;
    }
    if (!a.startsWith("--")) throw new BenchInputError(`unexpected argument ${JSON.stringify(a)}`);
    const eq = a.indexOf("=");
    const key = eq < 0 ? a.slice(2) : a.slice(2, eq);
    const value = eq < 0 ? argv[++i] : a.slice(eq + 1);
    if (value === undefined) throw new BenchInputError(`--${key} needs a value`);
    if (!["planner", "workload", "duration", "seed", "gpus", "slo", "static-target", "tick-s", "json"].includes(key)) throw new BenchInputError(`--planner runs take no --${key}`);
    flags.set(key, value);
  }
  const num = (k: string, d: number, ok: (n: number) => boolean) => {
    const v = flags.get(k);
    if (v === undefined) return d;
    const n = Number(v);
    if (!Number.isFinite(n) || !ok(n)) throw new BenchInputError(`--${k}: invalid value ${JSON.stringify(v)}`);
    return n;
  };
  const slo = parseSlo(flags.get("slo") ?? "ttft=1s,itl=50ms");
  const o: CompareOptions = {
    planners: flags.get("planner")!.split(",").map((s) => s.trim()).filter(Boolean),
    shape: flags.get("workload") ?? DEFAULT_SHAPE,
    durationS: flags.has("duration") ? num("duration", 0, (n) => n > 0) : null,
    seed: num("seed", 1, (n) => Number.isInteger(n) && n >= 0),
    gpus: num("gpus", 16, (n) => Number.isInteger(n) && n >= 1 && n <= 4096),
    sloTtftS: slo.ttftS,
    sloItlS: slo.itlS,
    staticTarget: num("static-target", 0.99, (n) => n > 0 && n <= 1),
    tickS: num("tick-s", 10, (n) => n >= 1),
  };
  for (const p of o.planners) if (!PLANNER_NAMES.includes(p)) throw new BenchInputError(`--planner: unknown planner ${JSON.stringify(p)} (one of ${PLANNER_NAMES.join(", ")})`);
  const r = await comparePlanners(o);
  io.out(renderPlannerTable(r));
  if (flags.has("json")) writeFileSync(flags.get("json")!, JSON.stringify(r, null, 2) + "\n");
  return 0;
}

function parseSlo(text: string): { ttftS: number; itlS: number } {
  const out = { ttftS: 1, itlS: 0.05 };
  for (const part of text.split(",")) {
    const m = /^(ttft|itl)=(\d+(?:\.\d+)?)(ms|s)$/.exec(part.trim());
    if (!m) throw new BenchInputError(`--slo: expected ttft=…(s|ms),itl=…(s|ms), got ${JSON.stringify(part)}`);
    const s = Number(m[2]) / (m[3] === "ms" ? 1000 : 1);
    if (m[1] === "ttft") out.ttftS = s;
    else out.itlS = s;
  }
  return out;
}

export function renderPlannerTable(r: Awaited<ReturnType<typeof comparePlanners>>): string {
  const cols = ["planner", "GPU-s", "SLO", "SLO/GPU-h", "scale ev", "flaps", "held p99 s", "dropped", "requests", "wall s"];
  const rows = Object.entries(r.planners).map(([name, s]) => [
    name === "static" && r.static_engines !== null ? `static (${r.static_engines})` : name,
    String(s.gpu_seconds),
    `${(s.slo_attainment * 100).toFixed(2)}%`,
    s.gpu_seconds > 0 ? (s.slo_attainment / (s.gpu_seconds / 3600)).toFixed(4) : "-",
    String(s.scale_events),
    String(s.flaps),
    s.held_wait_p99_s.toFixed(1),
    String(s.dropped),
    String(s.requests),
    s.wall_s.toFixed(1),
  ]);
  const w = cols.map((c, i) => Math.max(c.length, ...rows.map((x) => x[i]!.length)));
  const line = (xs: string[]) => xs.map((x, i) => (i === 0 ? x.padEnd(w[i]!) : x.padStart(w[i]!))).join("  ");
  return [`${r.shape}, ${r.duration_s} s, seed ${r.seed}`, line(cols), ...rows.map(line)].join("\n");
}
