// What the supervisor adds to an engine's launch so it uses this host's KV tier, per connector a
// driver declares (`EngineDriver.tier`; launch.ts picks the builder; pure, no I/O: the caller reads
// kv_tier.resp.password_file).
//
// - `sim-offload` (sim engines): `--kv-offload-url resp://HOST:PORT` (+ `--kv-offload-password-file`), see
//   src/engine/sim/offload.ts.
// - `lmcache-vllm` (vLLM): LMCache's connector with the tier as its remote backend. Checked against LMCache's source
//   (LMCache/LMCache, lmcache/v1/config.py _CONFIG_DEFINITIONS; env var = "LMCACHE_" + key upper-cased):
//   `remote_url` (resp:// → RESPConnectorAdapter, lmcache/v1/storage_backend/connector/
//   redis_adapter.py), `remote_serde` "naive" (the default, raw tensors), `save_unfull_chunk` which
//   that adapter asserts is False, `extra_config` JSON whose `password` (and `username`) the RESP
//   connector sends as AUTH, and `local_cpu` False so host memory for KV is herd's tier (counted by
//   its sizing) rather than a second LMCache-private copy. vLLM side: `--kv-transfer-config
//   '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'` (vLLM docs, LMCache examples).

import { parseHostPort } from "../config/checks.ts";
import type { KvTierConfig } from "../config/types.ts";

export interface EngineTierLaunch {
  argv: string[];
  env: Record<string, string>;
}

export const LMCACHE_KV_TRANSFER_CONFIG = JSON.stringify({ kv_connector: "LMCacheConnectorV1", kv_role: "kv_both" });

/** The address engines on this host dial for the tier's RESP server: a wildcard listener → loopback. */
export function tierRespUrl(t: KvTierConfig): string | null {
  if (t.resp === null) return null;
  const hp = parseHostPort(t.resp.listen);
  if (hp === null) return null;
  let host = hp.host;
  if (host === "0.0.0.0") host = "127.0.0.1";
  if (host === "::") host = "::1";
  return `resp://${host.includes(":") ? `[${host}]` : host}:${hp.port}`;
}

/** Sim engine flags; [] without kv_tier.resp. Optional figures: bytes per block, load rate (GB/s). */
export function simTierFlags(t: KvTierConfig, opts: { bytesPerBlock?: number; loadGbPerS?: number } = {}): string[] {
  const url = tierRespUrl(t);
  if (url === null) return [];
  const argv = ["--kv-offload-url", url];
  if (t.resp!.password_file) argv.push("--kv-offload-password-file", t.resp!.password_file);
  if (opts.bytesPerBlock !== undefined) argv.push("--kv-offload-bytes-per-block", String(opts.bytesPerBlock));
  if (opts.loadGbPerS !== undefined) argv.push("--kv-offload-load-gb-per-s", String(opts.loadGbPerS));
  return argv;
}

/**
 * vLLM flags and LMCache environment; null without kv_tier.resp. `argv` is the launch so far: a
 * launch that already has a --kv-transfer-config (P/D's NixlConnector) cannot take a second
 * connector, which is reported as `conflict` (the caller makes it a config finding).
 */
export function vllmTierLaunch(t: KvTierConfig, password: string | null, argv: readonly string[] = []): EngineTierLaunch | { conflict: string } | null {
  const url = tierRespUrl(t);
  if (url === null) return null;
  if (argv.includes("--kv-transfer-config")) return { conflict: "kv_tier.resp: this vLLM engine already has a --kv-transfer-config (P/D); vLLM takes one KV connector" };
  const env: Record<string, string> = {
    LMCACHE_REMOTE_URL: url,
    LMCACHE_REMOTE_SERDE: "naive",
    LMCACHE_SAVE_UNFULL_CHUNK: "False",
    LMCACHE_LOCAL_CPU: "False",
  };
  // The password is in the env only: `herd run --dry-run` passes tier/launch.ts tierPassword's "<redacted>".
  if (password !== null && password !== "") env.LMCACHE_EXTRA_CONFIG = JSON.stringify({ password });
  return { argv: ["--kv-transfer-config", LMCACHE_KV_TRANSFER_CONFIG], env };
}
