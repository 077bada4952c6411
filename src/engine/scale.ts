// What the supervisor needs to add one engine to an engines[] entry at run time (the planner's
// scale-up): a fresh worker id, a free port (and KV event ports), GPUs no live engine holds, and the
// driver's command line. Also: how many engines an entry starts with when the planner scales it, and
// the HTTP call of an engine's sleep mode.
import { HerdError, errorMessage } from "../core/errors.ts";
import type { Config } from "../config/types.ts";
import { otlpTracesUrl } from "../config/tracing.ts";
import { driverFor } from "./drivers/registry.ts";
import type { HostGpus } from "./gpus.ts";
import { PortAllocator } from "./plan.ts";
import type { EnginePlan } from "./types.ts";

/** The planner's pool for an entry, when the planner is on and scales it. */
export function plannerPoolOf(config: Config, entryIndex: number): Config["planner"]["pools"][number] | undefined {
  return config.planner.enabled ? config.planner.pools.find((p) => p.engine === entryIndex) : undefined;
}

/** Engines an entry starts with: its count, or for a planner pool its pin, else its min (capped by count). */
export function startCount(config: Config, entryIndex: number): number {
  const entry = config.engines[entryIndex]!;
  const pool = plannerPoolOf(config, entryIndex);
  if (!pool) return entry.count;
  return Math.min(entry.count, pool.pin >= 0 ? pool.pin : pool.min);
}

/** Whether the entry's engines are launched with their sleep mode on. */
export function sleepModeOf(config: Config, entryIndex: number): boolean {
  return plannerPoolOf(config, entryIndex)?.can_sleep === true && driverFor(config.engines[entryIndex]!.kind).sleep !== undefined;
}

/** Where engines export their own spans (tracing.enabled and tracing.engines), as a launch input; else nothing. */
export function engineTracing(config: Config): { tracesEndpoint?: string } {
  return config.tracing.enabled && config.tracing.engines ? { tracesEndpoint: otlpTracesUrl(config.tracing, process.env) } : {};
}

/** GPUs one engine of the entry takes: its share of `gpus`, else one when the kind uses GPUs and the host has any. */
export function gpusPerEngine(config: Config, entryIndex: number, host: HostGpus): number {
  const e = config.engines[entryIndex]!;
  if (e.gpus.length > 0) return Math.max(1, Math.floor(e.gpus.length / e.count));
  return driverFor(e.kind).usesGpus && host.ids.length > 0 ? 1 : 0;
}

export interface AddInput {
  config: Config;
  entryIndex: number;
  id: string;
  index: number;
  /** Ports and GPUs held by live engines (never handed out again). */
  usedPorts: ReadonlySet<number>;
  usedGpus: ReadonlySet<number>;
  host: HostGpus;
  self: string[];
  isPortFree: (host: string, port: number) => boolean;
}

/** Plan one more engine of an entry; throws a HerdError 409 when no GPU is free for it. */
export function planAddedEngine(a: AddInput): EnginePlan {
  const { config, entryIndex } = a;
  const entry = config.engines[entryIndex]!;
  const model = config.models.find((m) => m.name === entry.model)!;
  const driver = driverFor(entry.kind);
  if (!driver.managed) throw new HerdError(409, "invalid_request_error", `engines[${entryIndex}] is ${entry.kind}: herd does not start it`, "not_managed");
  const per = gpusPerEngine(config, entryIndex, a.host);
  // The entry's own GPU list when it names one (its engines rotate through it), else the host's GPUs no entry names.
  const named = new Set(config.engines.flatMap((e) => e.gpus));
  const pool = entry.gpus.length > 0 ? entry.gpus : a.host.ids.filter((g) => !named.has(g));
  const free = pool.filter((g) => !a.usedGpus.has(g));
  if (free.length < per) throw new HerdError(409, "invalid_request_error", `engines[${entryIndex}]: no free GPU for another engine (${per} needed, ${free.length} free)`, "no_gpu");
  const gpus = free.slice(0, per);
  const alloc = new PortAllocator(config.supervisor.port_range_start, new Set(a.usedPorts), a.isPortFree);
  const fixed = entry.port > 0 && a.index < entry.count && !a.usedPorts.has(entry.port + a.index);
  const port = fixed ? entry.port + a.index : alloc.take(entry.host);
  const kvPorts = driver.wantsKvPorts && !entry.kv_events ? { pub: alloc.take("0.0.0.0"), replay: alloc.take("0.0.0.0") } : undefined;
  const spec = driver.launch({
    id: a.id, node: config.node, model, entry, supervisor: config.supervisor, index: a.index, port, gpus, self: a.self,
    drainMs: config.frontend.drain_timeout_ms, sleepMode: sleepModeOf(config, entryIndex), ...(kvPorts ? { kvPorts } : {}), ...engineTracing(config),
  });
  if (!spec) throw new Error(`engines[${entryIndex}]: driver ${entry.kind} produced no command line`);
  const plan: EnginePlan = { id: a.id, kind: entry.kind, model: model.name, role: entry.role, entryIndex, index: a.index, url: spec.url, healthPath: spec.healthPath, spec };
  if (spec.kvEvents) plan.kvEvents = spec.kvEvents;
  return plan;
}

/** Ports a plan holds (engine and KV event ports). */
export function planPorts(plan: EnginePlan): number[] {
  const out: number[] = [];
  if (plan.spec) out.push(plan.spec.port);
  for (const ep of [plan.kvEvents?.endpoint, plan.kvEvents?.replayEndpoint]) {
    const m = ep ? /:(\d+)$/.exec(ep) : null;
    if (m) out.push(Number(m[1]));
  }
  return out;
}

/** POST an engine's sleep-mode endpoint; throws a HerdError 502 when it does not answer 200 in time. */
export async function postEngine(url: string, timeoutMs: number): Promise<void> {
  let status: number;
  try {
    const res = await fetch(url, { method: "POST", signal: AbortSignal.timeout(timeoutMs) });
    await res.arrayBuffer().catch(() => undefined);
    status = res.status;
  } catch (e) {
    throw new HerdError(502, "server_error", `POST ${url}: ${errorMessage(e)}`, "engine_unreachable");
  }
  if (status !== 200) throw new HerdError(502, "server_error", `POST ${url}: HTTP ${status}`, "engine_refused");
}
