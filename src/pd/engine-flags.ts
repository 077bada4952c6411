// The command-line flags and environment an engine needs for its P/D role, per P/D flow: the
// engine's driver declares which flow its kind speaks (`EngineDriver.pdFlow`, src/engine/driver.ts),
// so a new kind that speaks an existing flow needs nothing here. Pure: launch.ts puts `args` into the
// planned argv and merges `env` into the spawn env.
//
// `vllm-nixl` (vLLM, and herd's sim engine, which takes vLLM's flags) — NixlConnector
// (vllm docs/features/nixl_connector_usage.md; vllm/config/kv_transfer.py KVTransferConfig):
//   --kv-transfer-config '{"kv_connector":"NixlConnector","kv_role":"kv_both",
//                          "kv_load_failure_policy":"fail|recompute",
//                          "kv_connector_extra_config":{"backends":["UCX"],"kv_lease_duration":30}}'
//   The same JSON on both roles: the docs start prefill and decode with kv_both, and the
//   connector's behaviour per request comes from kv_transfer_params, not the role.
//   VLLM_NIXL_SIDE_CHANNEL_HOST = the node's advertised address (the handshake host a remote
//   decode connects to; default localhost only works on one host), VLLM_NIXL_SIDE_CHANNEL_PORT =
//   a port unique on the host (older vLLM listens on port + dp_rank × tp_size + tp_rank, newer on
//   port + dp_index: ports.ts reserves a span of tp_size ports).
//   NIXL_TCPSTORE_ENDPOINT and NIXL_TCPSTORE_ENDPOINTS = herd's NIXL metadata service when
//   `pd.nixl_metadata: herd` (NIXL reads the singular name up to ai-dynamo/nixl 7389391 and the
//   plural later; see nixl-metadata.ts).
// `sglang-bootstrap` (python/sglang/srt/server_args.py; docs/advanced_features/pd_disaggregation.md):
//   --disaggregation-mode prefill|decode, --disaggregation-transfer-backend nixl, and on a prefill
//   server a --disaggregation-bootstrap-port unique on the host (default 8998 would collide).
import { invariant } from "../core/errors.ts";
import type { EngineKind, PdConfig, Role } from "../config/types.ts";
import type { EnginePdFlow } from "../engine/driver.ts";
import { driverFor } from "../engine/drivers/registry.ts";

/** Ports ports.ts planned for one worker. */
export interface PdPorts {
  /** First NIXL side-channel port (vLLM / sim) and how many consecutive ports it owns. */
  sideChannel?: { port: number; span: number };
  /** SGLang prefill bootstrap server port. */
  bootstrap?: number;
}

export interface PdFlagInput {
  kind: EngineKind;
  /** The flow to configure when it is not the kind's own (a sim engine in SGLang's flow, flow.ts). */
  flow?: EnginePdFlow | null | undefined;
  role: Role;
  pd: PdConfig;
  /** node.advertise: where peers reach this worker's side channel / bootstrap server. */
  advertise: string;
  ports: PdPorts | undefined;
  /** host:port of herd's NIXL metadata service; required when pd.nixl_metadata is `herd`. */
  nixlMetadataEndpoint: string | null;
}

export interface PdLaunch {
  args: string[];
  env: Record<string, string>;
}

/** vLLM's default lease of held prefill blocks (kv_connector_extra_config.kv_lease_duration, s). */
export const KV_LEASE_DURATION_S = 30;
/** SGLang's transfer backend herd configures (NIXL: the metadata service herd serves). */
export const SGLANG_TRANSFER_BACKEND = "nixl";

/** vLLM's --kv-transfer-config JSON for a P/D worker. */
export function vllmKvTransferConfig(policy: PdConfig["kv_load_failure_policy"]): string {
  return JSON.stringify({
    kv_connector: "NixlConnector",
    kv_role: "kv_both",
    kv_load_failure_policy: policy,
    kv_connector_extra_config: { backends: ["UCX"], kv_lease_duration: KV_LEASE_DURATION_S },
  });
}

/** The P/D flow herd configures for engines of this kind; null: herd sets no P/D flags for it. */
export function pdFlowOf(kind: EngineKind): EnginePdFlow | null {
  return driverFor(kind).pdFlow;
}

export function pdEngineFlags(input: PdFlagInput): PdLaunch {
  const out: PdLaunch = { args: [], env: {} };
  const flow = input.flow !== undefined ? input.flow : pdFlowOf(input.kind);
  if (input.role === "aggregated" || flow === null) return out;
  if (input.pd.nixl_metadata === "herd") {
    invariant(input.nixlMetadataEndpoint !== null, "pd.nixl_metadata is herd but no NIXL metadata endpoint was given");
    out.env.NIXL_TCPSTORE_ENDPOINT = input.nixlMetadataEndpoint;
    out.env.NIXL_TCPSTORE_ENDPOINTS = input.nixlMetadataEndpoint;
  }
  if (flow === "sglang-bootstrap") {
    out.args.push("--disaggregation-mode", input.role, "--disaggregation-transfer-backend", SGLANG_TRANSFER_BACKEND);
    if (input.role === "prefill") {
      invariant(input.ports?.bootstrap !== undefined, "an SGLang prefill worker needs a planned bootstrap port");
      out.args.push("--disaggregation-bootstrap-port", String(input.ports.bootstrap));
    }
    return out;
  }
  invariant(input.ports?.sideChannel !== undefined, `a ${input.kind} ${input.role} worker needs a planned side-channel port`);
  out.args.push("--kv-transfer-config", vllmKvTransferConfig(input.pd.kv_load_failure_policy));
  out.env.VLLM_NIXL_SIDE_CHANNEL_HOST = input.advertise;
  out.env.VLLM_NIXL_SIDE_CHANNEL_PORT = String(input.ports.sideChannel.port);
  return out;
}
