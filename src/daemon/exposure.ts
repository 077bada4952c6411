// Startup warnings about what this node exposes beyond loopback (docs/references.md#reliability-2, mitigations 2
// and 10): an unauthenticated OpenAI API on a non-loopback listener, bearer keys sent in clear to one, and engine side sockets (KV
// events) bound on every interface — which vLLM and SGLang require for a ZMQ publisher that binds.
// Pure: config + planned engines in, warning lines out; the daemon logs them.
import type { Config } from "../config/types.ts";
import type { EnginePlan } from "../engine/types.ts";
import { metricsExposureLine } from "../http/metrics-access.ts";

const LOOPBACK = /^(127\.\d{1,3}\.\d{1,3}\.\d{1,3}|localhost|::1|\[::1\])$/;

function hostOf(listen: string): string {
  const m = /^\[([^\]]+)\]:\d+$/.exec(listen) ?? /^([^:]+):\d+$/.exec(listen);
  return m?.[1] ?? listen;
}

/** `tcp://*:P`, `tcp://0.0.0.0:P`, `tcp://[::]:P` and friends: every interface. */
function isWildcardEndpoint(ep: string): boolean {
  const host = /^tcp:\/\/(\[[^\]]*\]|[^:/]+):/.exec(ep)?.[1] ?? "";
  return host === "*" || host === "0.0.0.0" || host === "[::]" || host === "::" || host === "[*]";
}

/** Endpoints an engine's `--kv-events-config` makes it bind on every interface. */
export function wildcardKvEndpoints(plan: EnginePlan): string[] {
  const argv = plan.spec?.argv;
  if (!argv || argv.includes("--kv-events-bind-host")) return [];
  const i = argv.indexOf("--kv-events-config");
  if (i < 0) return [];
  let cfg: { endpoint?: unknown; replay_endpoint?: unknown };
  try {
    cfg = JSON.parse(argv[i + 1] ?? "");
  } catch {
    return [];
  }
  return [cfg.endpoint, cfg.replay_endpoint].filter((e): e is string => typeof e === "string" && isWildcardEndpoint(e));
}

export function exposureWarnings(config: Config, plans: readonly EnginePlan[]): string[] {
  const out: string[] = [];
  const f = config.frontend;
  if (!LOOPBACK.test(hostOf(f.listen)) && f.api_keys.length === 0)
    out.push(`frontend.listen ${f.listen} is reachable from other hosts and frontend.api_keys is empty: anyone who can reach it can use the models`);
  if (!LOOPBACK.test(hostOf(f.listen)) && f.tls.cert === "" && (f.api_keys.length > 0 || f.admin_token !== ""))
    out.push(`frontend.listen ${f.listen} is reachable from other hosts as plain HTTP: bearer keys, prompts and completions cross the network in clear; set frontend.tls, or terminate TLS in front of herd on a loopback listener (docs/operate.md)`);
  const metrics = metricsExposureLine(f.metrics, f.listen, f.admin_token !== "");
  if (metrics?.level === "warn") out.push(metrics.message);
  const peer = peerExposure(config);
  if (peer && !peer.tls)
    out.push(`cluster peer API on ${peer.listen} carries prompts, completions and KV between hosts as plain HTTP (token only); set cluster.tls and cluster.listen for mutual TLS (docs/cluster.md)`);
  const pdEngines = plans.some((p) => p.role === "prefill" || p.role === "decode");
  if (config.pd.nixl_metadata === "herd" && pdEngines && !LOOPBACK.test(config.pd.nixl_metadata_host))
    out.push(`pd.nixl_metadata_host ${config.pd.nixl_metadata_host}: herd's NIXL metadata store has no authentication and is reachable from other hosts there; any of them can read the engines' NIXL metadata and publish agents of their own (docs/operate.md)`);
  const resp = config.kv_tier.resp;
  if (resp && !LOOPBACK.test(hostOf(resp.listen)))
    out.push(`kv_tier.resp.listen ${resp.listen} is reachable from other hosts: the KV tier answers anyone with its password (failed AUTH is slowed and counted; the password crosses the LAN in clear)`);
  for (const p of plans) {
    const eps = wildcardKvEndpoints(p);
    if (eps.length)
      out.push(`worker ${p.id} (${p.kind}) binds its KV event sockets on every interface (${eps.join(", ")}); firewall those ports from other hosts (docs/operate.md)`);
  }
  return out;
}

/** Start-up lines that are not warnings: how /metrics is restricted on a non-loopback listener. */
export function exposureInfo(config: Config): string[] {
  const f = config.frontend;
  const line = metricsExposureLine(f.metrics, f.listen, f.admin_token !== "");
  const peer = peerExposure(config);
  const tls = f.tls.cert === "" ? [] : [`frontend on ${f.listen}: TLS (frontend.tls)${f.tls.ca !== "" ? ", client certificates signed by frontend.tls.ca required" : ""}`];
  return [...(line?.level === "info" ? [line.message] : []), ...tls, ...(peer?.tls ? [`cluster peer API on ${peer.listen}: mutual TLS (cluster.tls)`] : [])];
}

/** Where the peer API listens when other hosts can be peers (null: loopback, or the one-node default cluster). */
function peerExposure(config: Config): { listen: string; tls: boolean } | null {
  const c = config.cluster;
  const multiHost = c.discovery !== "file" || c.file.dir !== "";
  const listen = c.listen !== "" ? c.listen : config.frontend.listen;
  if (!multiHost || LOOPBACK.test(hostOf(listen))) return null;
  return { listen, tls: c.tls.cert !== "" };
}
