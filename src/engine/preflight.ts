// What `herd run` and `herd config check` ask the engine layer before anything starts: the engine
// checks (check.ts) against this host's GPUs, and for `--dry-run` the rendered plan.
import type { Finding } from "../config/findings.ts";
import type { Config } from "../config/types.ts";
import { checkEngines } from "./check.ts";
import { renderDryRun } from "./dry-run.ts";
import { detectGpus, type GpuProbe, type HostGpus } from "./gpus.ts";
import { planEngines } from "./plan.ts";
import type { EnginePlan } from "./types.ts";

export interface Preflight {
  host: HostGpus;
  findings: Finding[];
  /** The --dry-run text; throws on a plan error (only call when findings have no error). */
  dryRun(): string;
}

/** `finish` completes the plans (P/D flags) and returns lines the dry run prints after them. */
export function preflight(config: Config, lineOf?: (path: string) => number, probe?: GpuProbe, finish?: (plans: EnginePlan[]) => string[]): Preflight {
  const host = detectGpus(probe);
  return {
    host,
    findings: checkEngines(config, host, lineOf),
    dryRun: () => {
      let extra: string[] = [];
      const plans = planEngines(config, { hostGpus: host, ...(finish ? { finish: (ps) => void (extra = finish(ps)) } : {}) });
      const text = renderDryRun(config, plans, host);
      return extra.length ? `${text}\n\n## P/D ports\n${extra.join("\n")}` : text;
    },
  };
}
