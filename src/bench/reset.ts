// Prefix-cache reset before each load level of a sweep (default on; `--reset-prefix-cache false`
// keeps the cache). Without it, a sweep's later levels find the earlier levels' prompts cached
// (doc-qa: ~96% of prompt tokens) and measure a warm cache, not the load.
//
// The endpoint is vLLM's POST /reset_prefix_cache, mounted only when VLLM_SERVER_DEV_MODE=1
// (vllm-project/vllm, vllm/entrypoints/serve/cache/api_router.py: `attach_router` returns early
// otherwise; the handler answers 200 without checking that the reset succeeded). herd's sim engine
// serves the same path (src/engine/sim/routes.ts). herd itself has no such route: when the URL is a
// herd (its /admin/cluster answers), the reset goes to every worker's engine URL instead, and the
// engines' AllBlocksCleared events empty herd's KV index as well.
import { errorMessage } from "../core/errors.ts";

export interface ResetOutcome {
  /** Engine URLs whose cache was reset. */
  reset: string[];
  /** One line per URL that refused or failed, with the reason. */
  failed: string[];
}

const TIMEOUT_MS = 10_000;

async function post(url: string, apiKey: string | null): Promise<{ status: number } | { error: string }> {
  try {
    const res = await fetch(`${url}/reset_prefix_cache`, { method: "POST", headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(TIMEOUT_MS), redirect: "error" });
    await res.arrayBuffer();
    return { status: res.status };
  } catch (e) {
    return { error: errorMessage(e) };
  }
}

/** The engine URLs behind a herd, from its admin API; null when `base` is not a herd. */
async function herdWorkers(base: string, apiKey: string | null): Promise<string[] | null> {
  try {
    const res = await fetch(`${base}/admin/cluster`, { headers: apiKey ? { authorization: `Bearer ${apiKey}` } : {}, signal: AbortSignal.timeout(TIMEOUT_MS), redirect: "error" });
    if (!res.ok) {
      await res.arrayBuffer();
      return null;
    }
    const body = (await res.json()) as { workers?: { url?: unknown; state?: unknown }[] };
    if (!Array.isArray(body.workers)) return null;
    return body.workers.filter((w) => typeof w.url === "string" && w.state !== "stopped" && w.state !== "failed").map((w) => String(w.url).replace(/\/+$/, ""));
  } catch {
    return null;
  }
}

/** Reset the prefix cache of the engine at `url`, or of every engine behind a herd at `url`. */
export async function resetPrefixCache(url: string, apiKey: string | null): Promise<ResetOutcome> {
  const base = url.replace(/\/+$/, "").replace(/\/v1$/, "");
  const direct = await post(base, apiKey);
  if ("status" in direct && direct.status >= 200 && direct.status < 300) return { reset: [base], failed: [] };
  // 404/405: not an engine with the dev endpoint — maybe a herd in front of engines.
  const workers = "status" in direct && (direct.status === 404 || direct.status === 405) ? await herdWorkers(base, apiKey) : null;
  if (workers === null) {
    const why = "status" in direct ? `HTTP ${direct.status}${direct.status === 404 ? " (vLLM serves it only with VLLM_SERVER_DEV_MODE=1)" : ""}` : direct.error;
    return { reset: [], failed: [`POST ${base}/reset_prefix_cache: ${why}`] };
  }
  const out: ResetOutcome = { reset: [], failed: [] };
  for (const w of workers) {
    const r = await post(w, null);
    if ("status" in r && r.status >= 200 && r.status < 300) out.reset.push(w);
    else out.failed.push(`POST ${w}/reset_prefix_cache (a worker of the herd at ${base}): ${"status" in r ? `HTTP ${r.status}` : r.error}`);
  }
  return out;
}
