// The request bodies of the two P/D legs, as the engines' own reference routers build them. Pure:
// body in, body out; the orchestrator sends them.
//
// vLLM (NixlConnector; vllm tests/v1/kv_connector/nixl_integration/toy_proxy_server.py @ 030ea52e):
//   prefill leg: the client's body with `kv_transfer_params: {do_remote_decode: true,
//   do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null,
//   remote_port: null}`, `stream: false`, `max_tokens: 1` (and `max_completion_tokens: 1` if the
//   client sent it), no `stream_options`, no `min_tokens`/`min_completion_tokens`.
//   decode leg: the client's original body plus the prefill response's top-level
//   `kv_transfer_params`, forwarded verbatim (opaque: its fields differ between vLLM versions).
// SGLang (python/sglang/srt/disaggregation/mini_lb.py): one body for both workers with
//   `bootstrap_host` (the prefill worker's host, IPv6 bracketed), `bootstrap_port` (its bootstrap
//   port or null) and a random `bootstrap_room` in [0, 2^63 − 1]; both sent at once, the decode
//   worker's answer is the client's.
import type { Rng } from "../core/rng.ts";

type Body = Record<string, unknown>;

export const VLLM_PREFILL_PARAMS = Object.freeze({
  do_remote_decode: true,
  do_remote_prefill: false,
  remote_engine_id: null,
  remote_block_ids: null,
  remote_host: null,
  remote_port: null,
});

/** The vLLM prefill leg's body: prefill only, one token, not streamed. */
export function vllmPrefillBody(client: Body): Body {
  const b: Body = { ...client, kv_transfer_params: { ...VLLM_PREFILL_PARAMS }, stream: false, max_tokens: 1 };
  if ("max_completion_tokens" in client) b.max_completion_tokens = 1;
  delete b.stream_options;
  delete b.min_tokens;
  delete b.min_completion_tokens;
  return b;
}

/**
 * The `kv_transfer_params` a vLLM prefill answer carries (top level of its JSON), or null when it
 * has none (a prompt shorter than one block holds no blocks; the decode leg then runs a full request).
 */
export function kvTransferParamsOf(prefillAnswer: unknown): Record<string, unknown> | null {
  if (typeof prefillAnswer !== "object" || prefillAnswer === null) return null;
  const p = (prefillAnswer as Body).kv_transfer_params;
  return typeof p === "object" && p !== null && !Array.isArray(p) ? (p as Record<string, unknown>) : null;
}

/** The vLLM decode leg's body: the client's own, with the prefill side's params verbatim. */
export function vllmDecodeBody(client: Body, params: Record<string, unknown> | null): Body {
  if (params === null) {
    const { kv_transfer_params: _drop, ...rest } = client;
    return rest;
  }
  return { ...client, kv_transfer_params: params };
}

/** `host` of a URL as SGLang's mini_lb puts it in `bootstrap_host` (IPv6 in brackets). */
export function bootstrapHost(workerUrl: string): string {
  const h = new URL(workerUrl).hostname; // URL keeps IPv6 brackets in hostname
  return h.includes(":") && !h.startsWith("[") ? `[${h}]` : h;
}

/** A random bootstrap room in [0, 2^63 − 1], drawn from the request's seeded stream. */
export function bootstrapRoom(rng: Rng): bigint {
  const hi = BigInt(Math.floor(rng.float() * 2 ** 31)); // 31 bits
  const lo = BigInt(Math.floor(rng.float() * 2 ** 32)); // 32 bits
  return (hi << 32n) | lo;
}

/** The one body SGLang's prefill and decode workers both get. `room` is rendered as a JSON integer. */
export function sglangPdBody(client: Body, prefillUrl: string, bootstrapPort: number | null, room: bigint): string {
  const b: Body = { ...client, bootstrap_host: bootstrapHost(prefillUrl), bootstrap_port: bootstrapPort, bootstrap_room: "__ROOM__" };
  // JSON.stringify cannot write integers above 2^53 exactly; splice the decimal in.
  return JSON.stringify(b).replace('"__ROOM__"', room.toString());
}
