// The `recover` step after a herd restart (issue 9): engines a previous herd left running are
// adopted when the new plan has the very same engine — same worker id, HTTP port and command line
// (argv and environment, hashed) — and it answers its health check; everything else is reaped as
// before (orphans.ts). A loaded 70B model is minutes of warm-up that a herd upgrade or crash need
// not cost. The per-kind rule is the driver's `recover`; this file gathers the facts.
import type { Probe } from "./health.ts";
import { driverFor } from "./drivers/registry.ts";
import { leftoversOf } from "./orphans.ts";
import type { EngineRecord } from "./orphans.ts";
import type { EnginePlan, LaunchSpec } from "./types.ts";
import { readStat } from "./procfs.ts";

/** Every port a LaunchSpec makes the engine bind: HTTP, and KV event publisher / replay. */
export function specPorts(spec: LaunchSpec): number[] {
  const ports = [spec.port];
  for (const ep of [spec.kvEvents?.endpoint, spec.kvEvents?.replayEndpoint]) {
    const m = ep ? /:(\d+)$/.exec(ep) : null;
    if (m) ports.push(Number(m[1]));
  }
  return ports;
}

/** Records whose engine (or what it started) is still running. */
export function liveRecords(records: readonly EngineRecord[]): EngineRecord[] {
  return records.filter((r) => leftoversOf(r).length > 0);
}

/** Ports live engines hold: the planner may hand them out again (to the same engine, if adopted). */
export function heldPorts(live: readonly EngineRecord[]): Set<number> {
  return new Set(live.flatMap((r) => r.ports ?? (r.port ? [r.port] : [])));
}

function leaderIsRecorded(rec: EngineRecord): boolean {
  const st = readStat(rec.pid);
  return st !== null && st.state !== "Z" && st.startTicks === rec.startTicks;
}

export interface Sorted {
  /** Worker id → the previous engine to adopt for it. */
  adopt: Map<string, EngineRecord>;
  /** Live leftovers to terminate. */
  reap: EngineRecord[];
}

/** Decide, per live leftover, adopt or reap. Probes only the candidates that match their plan. */
export async function sortLeftovers(live: readonly EngineRecord[], plans: readonly EnginePlan[], probe: Probe, timeoutMs: number): Promise<Sorted> {
  const adopt = new Map<string, EngineRecord>();
  const reap: EngineRecord[] = [];
  for (const rec of live) {
    const plan = plans.find((p) => p.id === rec.worker);
    const spec = plan?.spec;
    const matches =
      plan !== undefined && spec != null && !adopt.has(rec.worker) && rec.port !== undefined && rec.argvHash !== undefined &&
      leaderIsRecorded(rec) && driverFor(plan.kind).recover({ worker: rec.worker, port: rec.port, argvHash: rec.argvHash }, spec);
    if (matches && (await probe(plan.url + plan.healthPath, timeoutMs, driverFor(plan.kind).health.healthy)).ok) adopt.set(rec.worker, rec);
    else reap.push(rec);
  }
  return { adopt, reap };
}
