// The workload flags `herd bench` and `herd simulate` share (--workload, --rate/--concurrency,
// --duration/--requests, --seed, --warmup, --slo, --ignore-eos), parsed once so both commands
// accept exactly the same words and say the same things about mistakes.
import { type Arrivals, BenchInputError, parseSyntheticWorkload, type Workload } from "./plan.ts";
import type { RunLoad } from "./report.ts";
import { parseDuration, parseSlo, type Slo } from "./stats.ts";
import { parseTrace } from "./trace.ts";

export interface WorkloadFlags {
  workload: Workload;
  /** One entry per load level of a sweep (a single recorded load for a trace without a rate). */
  loads: RunLoad[];
  duration_s: number | null;
  requests: number | null;
  seed: number;
  warmup_s: number;
  slo: Slo;
  ignoreEos: boolean;
}

export function positiveList(name: string, text: string, integer: boolean): number[] {
  const xs = text.split(",").map((s) => Number(s.trim()));
  if (xs.length === 0 || xs.some((x) => !(x > 0) || !Number.isFinite(x) || (integer && !Number.isInteger(x))))
    throw new BenchInputError(`--${name}: expected ${integer ? "positive integers" : "positive numbers"} separated by commas, got ${JSON.stringify(text)}`);
  return xs;
}

export function trueFalse(flags: Map<string, string>, name: string, dflt: boolean): boolean {
  const text = flags.get(name) ?? String(dflt);
  if (text !== "true" && text !== "false") throw new BenchInputError(`--${name}: true or false`);
  return text === "true";
}

/** `given`: a workload the caller built itself (herd simulate --trace: a decision log). */
export async function parseWorkloadFlags(flags: Map<string, string>, given?: Workload): Promise<WorkloadFlags> {
  const wText = flags.get("workload");
  if (wText === undefined && !given) throw new BenchInputError("--workload is required (doc-qa, multi-turn, rag, hot-prefix, fixed, mixed, trace:FILE)");
  let workload: Workload;
  if (given) workload = given;
  else if (wText!.startsWith("trace:")) {
    const file = wText!.slice("trace:".length);
    const f = Bun.file(file);
    if (!(await f.exists())) throw new BenchInputError(`trace file not found: ${file}`);
    workload = { kind: "trace", file, requests: parseTrace(await f.text(), file) };
  } else workload = parseSyntheticWorkload(wText!);

  const rates = flags.has("rate") ? positiveList("rate", flags.get("rate")!, false) : null;
  const concs = flags.has("concurrency") ? positiveList("concurrency", flags.get("concurrency")!, true) : null;
  if (rates && concs) throw new BenchInputError("give --rate or --concurrency, not both");
  if (!rates && !concs && workload.kind !== "trace") throw new BenchInputError("give --rate R (Poisson arrivals) or --concurrency C (closed loop)");
  const duration_s = flags.has("duration") ? parseDuration(flags.get("duration")!) : null;
  const requests = flags.has("requests") ? positiveList("requests", flags.get("requests")!, true)[0]! : duration_s === null && workload.kind !== "trace" ? 200 : null;
  const seed = flags.has("seed") ? Number(flags.get("seed")) : 1;
  if (!Number.isInteger(seed)) throw new BenchInputError("--seed: expected an integer");
  const warmup_s = flags.has("warmup") ? parseDuration(flags.get("warmup")!) : 0;
  const slo: Slo = flags.has("slo") ? parseSlo(flags.get("slo")!) : {};
  const ignoreEos = trueFalse(flags, "ignore-eos", true);
  const loads: RunLoad[] = rates
    ? rates.map((rate) => ({ rate, concurrency: null }))
    : concs
      ? concs.map((c) => ({ rate: null, concurrency: c }))
      : [{ rate: null, concurrency: null, recorded: true }];
  return { workload, loads, duration_s, requests, seed, warmup_s, slo, ignoreEos };
}

export function arrivalsFor(load: RunLoad): Arrivals {
  return load.rate !== null ? { kind: "poisson", rate: load.rate } : load.concurrency !== null ? { kind: "closed" } : { kind: "recorded" };
}

/** The sweep as the JSON output records it: the rates or the concurrencies (null when not used). */
export function loadLists(loads: readonly RunLoad[]): { rates: number[] | null; concurrency: number[] | null } {
  return {
    rates: loads[0]?.rate != null ? loads.map((l) => l.rate!) : null,
    concurrency: loads[0]?.concurrency != null ? loads.map((l) => l.concurrency!) : null,
  };
}
