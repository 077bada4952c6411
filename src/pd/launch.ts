// P/D launch wiring (issue 13): after the engine plan (src/engine/plan.ts) fixed HTTP and KV-event
// ports, plan every prefill/decode worker's side-channel / bootstrap ports (ports.ts) and add its
// role flags and environment (engine-flags.ts) to its launch spec. The engine layer cannot import
// src/pd (docs/architecture.md: pd sits above engine), so the drivers' command lines are completed
// here, through PlanOptions.finish, which the daemon's supervisor and `herd run --dry-run` pass.
import type { Config } from "../config/types.ts";
import type { EnginePlan } from "../engine/types.ts";
import { pdEngineFlags } from "./engine-flags.ts";
import { modelFlow, pdLaunchFlow } from "./flow.ts";
import { describePdPorts, planPdPorts } from "./ports.ts";

/** Whether any engine entry has a P/D role. */
export function hasPdRoles(config: Config): boolean {
  return config.engines.some((e) => e.role === "prefill" || e.role === "decode");
}

/**
 * Models with both prefill and decode engines whose prefill engines speak one P/D flow (flow.ts:
 * vLLM's NixlConnector or SGLang's bootstrap flow): the ones herd's P/D plan serves.
 */
export function pdModels(config: Config): Set<string> {
  const out = new Set<string>();
  for (const m of config.models) {
    const es = config.engines.filter((e) => e.model === m.name);
    if (modelFlow(config, m.name) !== null && es.some((e) => e.role === "decode")) out.add(m.name);
  }
  return out;
}

export interface PdLaunchOptions {
  /** Whether a port can be bound (the daemon: canListen; default: assume free). */
  isPortFree?: (port: number) => boolean;
  /** Ports to keep away from (herd's listener, the metadata service). */
  reserved?: Iterable<number>;
  /** host:port of herd's NIXL metadata service (read when plans are finished: it starts first). */
  nixlEndpoint: () => string | null;
  /** Each SGLang-flow prefill worker's planned bootstrap port (the P/D plan puts it in the legs' body). */
  bootstrap?: (workerId: string, port: number) => void;
}

/**
 * Complete the plans in place: the role's args go before the entry's own `args` (which stay last,
 * so an operator's explicit --kv-transfer-config still wins, as with every generated flag), the
 * role's env is merged under the entry's env. Returns the `--dry-run` lines.
 */
export function applyPdLaunch(config: Config, plans: EnginePlan[], o: PdLaunchOptions): string[] {
  if (!plans.some((p) => p.role !== "aggregated")) return [];
  // A sim engine in SGLang's flow is planned and launched for SGLang's flow (flow.ts).
  const launchFlow = (p: EnginePlan) => (p.spec === null ? undefined : pdLaunchFlow(config, config.engines[p.entryIndex]!));
  const ports = planPdPorts(plans.map((p) => ({ ...p, pdFlow: launchFlow(p) })), {
    start: config.supervisor.port_range_start,
    ...(o.isPortFree ? { isPortFree: o.isPortFree } : {}),
    ...(o.reserved ? { reserved: o.reserved } : {}),
  });
  const endpoint = config.pd.nixl_metadata === "herd" ? o.nixlEndpoint() : null;
  for (const p of plans) {
    if (p.spec === null || p.role === "aggregated") continue;
    const entry = config.engines[p.entryIndex]!;
    const planned = ports.get(p.id);
    if (planned?.bootstrap !== undefined) o.bootstrap?.(p.id, planned.bootstrap);
    const f = pdEngineFlags({ kind: p.kind, flow: launchFlow(p), role: p.role, pd: config.pd, advertise: config.node.advertise, ports: planned, nixlMetadataEndpoint: endpoint });
    const cut = p.spec.argv.length - entry.args.length;
    p.spec.argv = [...p.spec.argv.slice(0, cut), ...f.args, ...p.spec.argv.slice(cut)];
    // The spec's env (with the entry's env last) wins over generated values, as in engineEnv.
    p.spec.env = { ...f.env, ...p.spec.env };
  }
  const lines = describePdPorts(ports);
  if (endpoint !== null) lines.push(`NIXL metadata service (NIXL_TCPSTORE_ENDPOINT): ${endpoint}`);
  return lines;
}
