// Port plan for P/D side channels (vLLM NixlConnector's VLLM_NIXL_SIDE_CHANNEL_PORT) and SGLang
// bootstrap servers, on one host. Every engine on a host shares one port space: a side channel that
// lands on another engine's HTTP or KV-event port, or on another worker's side channel, fails at
// bind time or — worse, with SO_REUSEPORT — silently splits the handshakes. So the plan starts from
// the engine plan (src/engine/plan.ts, which already fixed HTTP and KV-event ports), reserves all
// of those, and hands out the rest upwards from `start`, skipping ports something already holds.
// Pure apart from the injected `isPortFree`.
import type { EnginePlan } from "../engine/types.ts";
import type { EnginePdFlow } from "../engine/driver.ts";
import { type PdPorts, pdFlowOf } from "./engine-flags.ts";

export interface PdPortOptions {
  /** First port to try (e.g. supervisor.port_range_start, or vLLM's default 5600). */
  start: number;
  /** Whether nothing outside herd holds the port (default: assume free; the daemon passes canListen). */
  isPortFree?: (port: number) => boolean;
  /** Ports to keep away from besides the plans' own (e.g. herd's listener, the NIXL metadata service). */
  reserved?: Iterable<number>;
}

/** Ports an engine plan already uses: HTTP, KV event publisher and replay (and an external URL's). */
export function portsOfPlan(p: EnginePlan): number[] {
  const out: number[] = [];
  if (p.spec !== null) out.push(p.spec.port);
  else {
    const u = portOf(p.url);
    if (u !== null) out.push(u);
  }
  for (const ep of [p.kvEvents?.endpoint, p.kvEvents?.replayEndpoint, p.spec?.kvEvents?.endpoint, p.spec?.kvEvents?.replayEndpoint]) {
    const port = ep ? portOf(ep) : null;
    if (port !== null) out.push(port);
  }
  return [...new Set(out)]; // plan.kvEvents is spec.kvEvents for managed engines
}

function portOf(endpoint: string): number | null {
  const m = /:(\d{1,5})(?:\/.*)?$/.exec(endpoint);
  if (!m) return null;
  const n = Number(m[1]);
  return n > 0 && n <= 65535 ? n : null;
}

/** How many consecutive side-channel ports a worker needs: one per TP rank (older vLLM). */
export function sideChannelSpan(p: EnginePlan): number {
  return Math.max(1, p.spec?.gpus.length ?? 1);
}

/** Plan side-channel and bootstrap ports for every managed prefill/decode worker of this host. */
export function planPdPorts(plans: readonly (EnginePlan & { pdFlow?: EnginePdFlow | null | undefined })[], opts: PdPortOptions): Map<string, PdPorts> {
  const isFree = opts.isPortFree ?? (() => true);
  const taken = new Set<number>(opts.reserved ?? []);
  for (const p of plans) for (const port of portsOfPlan(p)) taken.add(port);
  let next = opts.start;
  const take = (span: number): number => {
    for (;;) {
      if (next + span - 1 > 65535) throw new Error(`P/D ports: no ${span} free consecutive ports left below 65536 (from ${opts.start})`);
      let ok = true;
      for (let k = 0; k < span && ok; k++) ok = !taken.has(next + k) && isFree(next + k);
      if (ok) {
        const first = next;
        for (let k = 0; k < span; k++) taken.add(first + k);
        next += span;
        return first;
      }
      next++;
    }
  };
  const out = new Map<string, PdPorts>();
  for (const p of plans) {
    const flow = p.pdFlow !== undefined ? p.pdFlow : pdFlowOf(p.kind);
    if (p.spec === null || p.role === "aggregated" || flow === null) continue;
    if (flow === "sglang-bootstrap") {
      if (p.role === "prefill") out.set(p.id, { bootstrap: take(1) });
      continue;
    }
    const span = sideChannelSpan(p);
    out.set(p.id, { sideChannel: { port: take(span), span } });
  }
  return out;
}

/** One line per worker for `herd run --dry-run`. */
export function describePdPorts(ports: ReadonlyMap<string, PdPorts>): string[] {
  const lines: string[] = [];
  for (const [id, p] of ports) {
    if (p.sideChannel) {
      const { port, span } = p.sideChannel;
      lines.push(`${id}: NIXL side channel ${span > 1 ? `${port}-${port + span - 1}` : port} (VLLM_NIXL_SIDE_CHANNEL_PORT=${port})`);
    }
    if (p.bootstrap !== undefined) lines.push(`${id}: SGLang bootstrap ${p.bootstrap} (--disaggregation-bootstrap-port)`);
  }
  return lines;
}
