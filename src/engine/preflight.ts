// What `herd run` and `herd config check` ask the engine layer before anything starts: the engine
// checks (check.ts) against this host's GPUs, and for `--dry-run` the rendered plan.
import type { Finding } from "../config/findings.ts";
import type { Config } from "../config/types.ts";
import { checkEngines } from "./check.ts";
import { renderDryRun } from "./dry-run.ts";
import { detectGpus, type GpuProbe, type HostGpus } from "./gpus.ts";
import { planEngines } from "./plan.ts";

export interface Preflight {
  host: HostGpus;
  findings: Finding[];
  /** The --dry-run text; throws on a plan error (only call when findings have no error). */
  dryRun(): string;
}

export function preflight(config: Config, lineOf?: (path: string) => number, probe?: GpuProbe): Preflight {
  const host = detectGpus(probe);
  return {
    host,
    findings: checkEngines(config, host, lineOf),
    dryRun: () => renderDryRun(config, planEngines(config, { hostGpus: host }), host),
  };
}
