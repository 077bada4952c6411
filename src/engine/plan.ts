// Turns the engines[] entries into one plan per worker: stable ids, GPU shares, ports and the
// driver's LaunchSpec. Ports are decided once per herd start and kept across engine restarts, so
// a worker's URL never changes while herd runs.
import type { Config, EngineConfig } from "../config/types.ts";
import { driverFor } from "./drivers/registry.ts";
import { assignGpus, detectGpus, type HostGpus } from "./gpus.ts";
import { selfCommand } from "./self.ts";
import type { EnginePlan } from "./types.ts";
import { sleepModeOf, startCount } from "./scale.ts";

export interface PlanOptions {
  /** argv prefix that re-invokes herd (default: selfCommand()). */
  self?: string[];
  /** Whether a port can be bound on host (default: tries to listen). Allocation skips taken ones. */
  isPortFree?: (host: string, port: number) => boolean;
  /** The host's GPUs, for entries without `gpus` (default: detected once, see gpus.ts). */
  hostGpus?: HostGpus;
  /**
   * Completes the plans once every HTTP and KV-event port is fixed (P/D side-channel ports and role
   * flags: src/pd/launch.ts, which this layer may not import). May change specs in place. Gets the
   * plan's port checker, so ports it hands out skip the same taken (and leased) ones.
   */
  finish?: (plans: EnginePlan[], isPortFree: (host: string, port: number) => boolean) => void;
}

let detected: HostGpus | null = null;
const hostGpusOnce = (): HostGpus => (detected ??= detectGpus());

/** Try to bind host:port for a moment. vLLM binds with SO_REUSEPORT (docs/references.md#timing-A.3), so herd must choose. */
export function canListen(host: string, port: number): boolean {
  try {
    const s = Bun.listen({ hostname: host || "0.0.0.0", port, socket: { data() {} } });
    s.stop(true);
    return true;
  } catch {
    return false;
  }
}

/** Hands out ports upwards from a start, skipping reserved ones and ports already bound. */
export class PortAllocator {
  private next: number;
  constructor(
    start: number,
    private readonly reserved: Set<number>,
    private readonly isFree: (host: string, port: number) => boolean,
  ) {
    this.next = start;
  }
  take(host: string): number {
    while (this.next <= 65535) {
      const p = this.next++;
      if (this.reserved.has(p) || !this.isFree(host, p)) continue;
      this.reserved.add(p);
      return p;
    }
    throw new Error("supervisor.port_range_start: no free port left below 65536");
  }
}

/** Split an entry's GPUs evenly, in order: engine i of n gets the i-th slice. */
export function gpuShare(entry: EngineConfig, index: number, where: string): number[] {
  if (entry.gpus.length === 0) return [];
  if (entry.gpus.length % entry.count !== 0) {
    throw new Error(`${where}.gpus: ${entry.gpus.length} GPUs cannot be split evenly across count ${entry.count}`);
  }
  const per = entry.gpus.length / entry.count;
  return entry.gpus.slice(index * per, (index + 1) * per);
}

export function planEngines(config: Config, opts: PlanOptions = {}): EnginePlan[] {
  const self = opts.self ?? selfCommand();
  const isFree = opts.isPortFree ?? canListen;
  // Explicit ports first, so allocation never hands one of them to another engine.
  const reserved = new Set<number>();
  config.engines.forEach((e) => {
    if (driverFor(e.kind).managed && e.port > 0) for (let i = 0; i < e.count; i++) reserved.add(e.port + i);
  });
  const alloc = new PortAllocator(config.supervisor.port_range_start, reserved, isFree);
  const perKind = new Map<string, number>();
  const plans: EnginePlan[] = [];
  const gpuPlan = assignGpus(config, opts.hostGpus ?? hostGpusOnce());
  const gpuError = gpuPlan.issues.find((i) => i.severity === "error");
  if (gpuError) throw new Error(`${gpuError.path}: ${gpuError.message}`);

  config.engines.forEach((entry, entryIndex) => {
    const where = `engines[${entryIndex}]`;
    const model = config.models.find((m) => m.name === entry.model);
    if (!model) throw new Error(`${where}.model: unknown model ${JSON.stringify(entry.model)}`);
    const driver = driverFor(entry.kind);
    if (driver.managed && entry.kv_events && entry.count > 1) {
      throw new Error(`${where}.kv_events: explicit endpoints need count 1 (engines would share them)`);
    }
    // A planner pool starts with its pin or min engines; the planner adds the rest (scale.ts).
    const starting = startCount(config, entryIndex);
    for (let index = 0; index < starting; index++) {
      const k = perKind.get(entry.kind) ?? 0;
      perKind.set(entry.kind, k + 1);
      const id = `${config.node.name}/${entry.kind}-${k}`;
      const base = { id, kind: entry.kind, model: model.name, role: entry.role, entryIndex, index };
      if (!driver.managed) {
        if (!entry.url) throw new Error(`${where}.url: an external engine needs a url`);
        const plan: EnginePlan = { ...base, url: entry.url.replace(/\/+$/, ""), healthPath: entry.health_path, spec: null };
        if (entry.kv_events) {
          plan.kvEvents = {
            endpoint: entry.kv_events.endpoint,
            replayEndpoint: entry.kv_events.replay_endpoint,
            topic: entry.kv_events.topic,
          };
        }
        plans.push(plan);
        continue;
      }
      const port = entry.port > 0 ? entry.port + index : alloc.take(entry.host);
      const kvPorts = driver.wantsKvPorts && !entry.kv_events ? { pub: alloc.take("0.0.0.0"), replay: alloc.take("0.0.0.0") } : undefined;
      gpuShare(entry, index, where); // throws on an uneven split
      const gpus = gpuPlan.byEntry[entryIndex]?.[index] ?? [];
      const spec = driver.launch({
        id,
        node: config.node,
        model,
        entry,
        supervisor: config.supervisor,
        index,
        port,
        gpus,
        self,
        drainMs: config.frontend.drain_timeout_ms,
        maxOnDemandLoras: config.frontend.lora.max_per_engine,
        ...(sleepModeOf(config, entryIndex) ? { sleepMode: true } : {}),
        ...(kvPorts ? { kvPorts } : {}),
      });
      if (!spec) throw new Error(`${where}: driver ${entry.kind} produced no command line`);
      const plan: EnginePlan = { ...base, url: spec.url, healthPath: spec.healthPath, spec };
      if (spec.kvEvents) plan.kvEvents = spec.kvEvents;
      plans.push(plan);
    }
  });
  opts.finish?.(plans, isFree);
  return plans;
}
