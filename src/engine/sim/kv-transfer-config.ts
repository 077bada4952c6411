// vLLM's `--kv-transfer-config` JSON (vllm/config/kv_transfer.py KVTransferConfig) as far as the
// simulated engine implements it: the NixlConnector, its role, `engine_id` (a UUID when absent, as
// KVTransferConfig.__post_init__ makes one), `kv_load_failure_policy` ("fail" default | "recompute")
// and `kv_connector_extra_config.kv_lease_duration` (seconds, default 30: how long a prefill
// engine holds blocks nobody pulled; nixl/base_scheduler.py get_from_extra_config). Pure.

export type KvRole = "kv_producer" | "kv_consumer" | "kv_both";
export type KvLoadFailurePolicy = "fail" | "recompute";

export interface KvTransferConfig {
  connector: "NixlConnector";
  role: KvRole;
  engineId: string;
  loadFailurePolicy: KvLoadFailurePolicy;
  /** kv_connector_extra_config.kv_lease_duration, in seconds. */
  leaseDurationS: number;
}

/** vLLM's default lease (kv_connector_extra_config.kv_lease_duration). */
export const DEFAULT_KV_LEASE_S = 30;

const ROLES: readonly string[] = ["kv_producer", "kv_consumer", "kv_both"];
// NixlConnector and the newer registry names with the same request contract (factory.py).
const CONNECTORS: readonly string[] = ["NixlConnector", "NixlPullConnector"];

export function parseKvTransferConfig(text: string, newId: () => string = () => crypto.randomUUID()): KvTransferConfig {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (e) {
    throw new Error(`not JSON: ${e instanceof Error ? e.message : String(e)}`);
  }
  if (raw === null || typeof raw !== "object" || Array.isArray(raw)) throw new Error("expected a JSON object");
  const o = raw as Record<string, unknown>;
  if (typeof o.kv_connector !== "string" || !CONNECTORS.includes(o.kv_connector)) {
    throw new Error(`kv_connector: the simulated engine implements ${CONNECTORS.join(" / ")}, got ${JSON.stringify(o.kv_connector)}`);
  }
  const role = o.kv_role ?? "kv_both";
  if (typeof role !== "string" || !ROLES.includes(role)) throw new Error(`kv_role: expected one of ${ROLES.join(", ")}, got ${JSON.stringify(role)}`);
  const policy = o.kv_load_failure_policy ?? "fail";
  if (policy !== "fail" && policy !== "recompute") throw new Error(`kv_load_failure_policy: expected fail or recompute, got ${JSON.stringify(policy)}`);
  const engineId = o.engine_id ?? null;
  if (engineId !== null && typeof engineId !== "string") throw new Error("engine_id: expected a string");
  const extra = o.kv_connector_extra_config ?? {};
  if (extra === null || typeof extra !== "object" || Array.isArray(extra)) throw new Error("kv_connector_extra_config: expected an object");
  const lease = (extra as Record<string, unknown>).kv_lease_duration ?? DEFAULT_KV_LEASE_S;
  if (typeof lease !== "number" || !Number.isFinite(lease) || lease < 0) throw new Error(`kv_connector_extra_config.kv_lease_duration: expected seconds >= 0, got ${JSON.stringify(lease)}`);
  return { connector: "NixlConnector", role: role as KvRole, engineId: engineId ?? newId(), loadFailurePolicy: policy, leaseDurationS: lease };
}

/** A request's `kv_transfer_params` as the sim reads them; null when absent or not an object. */
export interface RemotePrefillParams {
  engineId: string;
  requestId: string;
  host: string;
  port: number;
  /** Flattened over KV-cache groups (newer vLLM sends one list per group). */
  blockIds: number[];
}

export type KvParamsIntent = { kind: "none" } | { kind: "remote_decode" } | { kind: "remote_prefill"; remote: RemotePrefillParams } | { kind: "invalid"; message: string };

/** What a request's `kv_transfer_params` asks of this engine (the connector's on_new_request checks). */
export function kvParamsIntent(body: unknown): KvParamsIntent {
  if (body === null || typeof body !== "object") return { kind: "none" };
  const p = (body as Record<string, unknown>).kv_transfer_params;
  if (p === undefined || p === null) return { kind: "none" };
  if (typeof p !== "object" || Array.isArray(p)) return { kind: "invalid", message: "kv_transfer_params must be an object" };
  const q = p as Record<string, unknown>;
  if (q.do_remote_decode === true) return { kind: "remote_decode" };
  if (q.do_remote_prefill !== true) return { kind: "none" };
  const ids = flattenBlockIds(q.remote_block_ids);
  const port = q.remote_port;
  if (ids === null || typeof q.remote_engine_id !== "string" || typeof q.remote_host !== "string" || !Number.isInteger(port)) {
    // vLLM logs "Got invalid KVTransferParams" and runs the request without a remote load.
    return { kind: "none" };
  }
  const requestId = typeof q.remote_request_id === "string" ? q.remote_request_id : "";
  return { kind: "remote_prefill", remote: { engineId: q.remote_engine_id, requestId, host: q.remote_host, port: port as number, blockIds: ids } };
}

function flattenBlockIds(v: unknown): number[] | null {
  if (!Array.isArray(v)) return null;
  const out: number[] = [];
  for (const x of v) {
    if (Number.isInteger(x)) out.push(x as number);
    else if (Array.isArray(x) && x.every((y) => Number.isInteger(y))) out.push(...(x as number[]));
    else return null;
  }
  return out;
}
