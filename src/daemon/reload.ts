// SIGHUP: reload the config file. The new file is parsed and validated like at start; on any error
// the findings are logged and the running config stays. Otherwise each changed key is either
// applied at once (LIVE_KEYS) or reported as needing a restart — and then NOT applied: the running
// node keeps the old value, so what runs is always a config that could have been started as is.
//
// Live: the frontend's admission, bounds and timeouts, which are read per request:
//   frontend.api_keys, frontend.admin_token, frontend.max_in_flight, frontend.max_body_bytes (up to
//   the listener's fixed backstop), frontend.first_token_timeout_ms, frontend.idle_timeout_ms
//   (both for requests admitted after the reload), frontend.drain_timeout_ms, migration_grace_ms, body_timeout_ms,
//   max_messages, max_prompt_chars, max_json_values, max_body_bytes_in_flight, metrics, queue
//   (tenants' limit buckets start full again when api_keys change);
//   and the whole `router` section: the daemon builds a new Router (policy, pipeline, knobs) over
//   the same registry and KV index and swaps it in atomically (Caddy's reload: provision the new,
//   then swap, then stop the old). Requests already routed keep their leases on the old router,
//   which still releases them into the shared registry's in-flight counts.
// Restart: everything else — the listener (frontend.listen), the node's identity and state
// (node.*), engines, models and supervisor (the processes are planned once: ports, GPUs, command
// lines), cluster, kv_ingest, kv_tier, planner, pd, tracing (the SDK is set up once, at start).
import type { Config } from "../config/types.ts";
import { applyOverrides, loadConfigFile, type Overrides } from "../config/load.ts";
import type { Finding } from "../config/findings.ts";

export const LIVE_KEYS: readonly string[] = [
  "frontend.api_keys",
  "frontend.admin_token",
  "frontend.max_in_flight",
  "frontend.max_body_bytes",
  "frontend.first_token_timeout_ms",
  "frontend.idle_timeout_ms",
  "frontend.drain_timeout_ms",
  "frontend.migration_grace_ms",
  "frontend.body_timeout_ms",
  "frontend.max_messages",
  "frontend.max_prompt_chars",
  "frontend.max_json_values",
  "frontend.max_body_bytes_in_flight",
  "frontend.metrics",
  "frontend.queue",
  "router",
];

export interface ConfigChanges {
  /** Changed keys applied by a reload. */
  live: string[];
  /** Changed keys that only take effect after a restart. */
  restart: string[];
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function same(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a) && Array.isArray(b)) return a.length === b.length && a.every((x, i) => same(x, b[i]));
  if (isObject(a) && isObject(b)) {
    const ka = Object.keys(a);
    return ka.length === Object.keys(b).length && ka.every((k) => k in b && same(a[k], b[k]));
  }
  return false;
}

/** Paths of the leaves that differ, e.g. `frontend.listen`, `engines[0].count`, `engines` (length changed). */
export function changedPaths(a: unknown, b: unknown, path = ""): string[] {
  if (same(a, b)) return [];
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])];
    return keys.flatMap((k) => changedPaths(a[k], b[k], path ? `${path}.${k}` : k));
  }
  if (Array.isArray(a) && Array.isArray(b) && a.length === b.length && a.some((x) => isObject(x))) {
    return a.flatMap((x, i) => changedPaths(x, b[i], `${path}[${i}]`));
  }
  return [path];
}

function liveKeyOf(path: string): string | undefined {
  return LIVE_KEYS.find((k) => path === k || path.startsWith(`${k}.`) || path.startsWith(`${k}[`));
}

/** Pure: which changes between two valid configs a reload applies, and which need a restart. */
export function classifyChanges(old: Config, next: Config): ConfigChanges {
  const live = new Set<string>();
  const restart: string[] = [];
  for (const p of changedPaths(old, next)) {
    const k = liveKeyOf(p);
    if (k) live.add(k);
    else restart.push(p);
  }
  return { live: [...live], restart };
}

/** The config a reload runs with: `running` with the live keys taken from `next`. */
export function mergeLive(running: Config, next: Config, live: readonly string[]): Config {
  const merged = structuredClone(running);
  for (const key of live) {
    const [section, field] = key.split(".") as [keyof Config, string | undefined];
    const from = next[section] as unknown as Record<string, unknown>;
    // A whole live section (`router`) is taken as a whole.
    if (field === undefined) (merged as unknown as Record<string, unknown>)[section] = structuredClone(from);
    else (merged[section] as unknown as Record<string, unknown>)[field] = structuredClone(from[field]);
  }
  return merged;
}

export interface ReloadLimits {
  /** Largest frontend.max_body_bytes the running listener can take (its backstop is fixed at start). */
  maxBodyBytesLive: number;
}

/** classifyChanges plus the running listener's limits: a change beyond them moves to `restart`. */
export function planReload(running: Config, next: Config, limits: ReloadLimits): ConfigChanges & { config: Config } {
  const changes = classifyChanges(running, next);
  if (changes.live.includes("frontend.max_body_bytes") && next.frontend.max_body_bytes > limits.maxBodyBytesLive) {
    changes.live = changes.live.filter((k) => k !== "frontend.max_body_bytes");
    changes.restart.push("frontend.max_body_bytes");
  }
  return { ...changes, config: mergeLive(running, next, changes.live) };
}

export type ReloadOutcome =
  | { ok: true; config: Config; live: string[]; restart: string[]; findings: Finding[] }
  | { ok: false; findings: Finding[]; file: string };

/** Read and validate the file (with the command line's overrides re-applied), then plan the reload. */
export async function reloadFromFile(path: string, overrides: Overrides, running: Config, limits: ReloadLimits): Promise<ReloadOutcome> {
  const loaded = await loadConfigFile(path);
  let findings = loaded.findings;
  let next = loaded.config;
  if (next && overrides.listen !== undefined) {
    const o = applyOverrides(next, overrides);
    findings = [...findings, ...o.findings];
    next = o.config;
  }
  if (!next) return { ok: false, findings, file: loaded.file ?? path };
  return { ok: true, ...planReload(running, next, limits), findings };
}
