// The worker: one engine endpoint herd can route to. The supervisor (local engines), the config
// (external engines) and, later, peer nodes produce workers; the registry holds them; the router
// reads them. These types are the seam between those parts.
import type { EngineKind, Role } from "../config/types.ts";

export const WORKER_STATES = ["starting", "ready", "draining", "failed", "stopped"] as const;
export type WorkerState = (typeof WORKER_STATES)[number];

/** Live load of a worker: herd's own accounting, corrected by scraped engine metrics. */
export interface WorkerLoad {
  /** Requests herd has dispatched to this worker and not yet finished. */
  in_flight: number;
  /** From the engine's /metrics (vllm:num_requests_running); null until scraped. */
  running: number | null;
  /** From the engine's /metrics (vllm:num_requests_waiting); null until scraped. */
  waiting: number | null;
  /** From the engine's /metrics (vllm:kv_cache_usage_perc, 0..1); null until scraped. */
  kv_usage: number | null;
  /** Wall-clock ms of the last successful scrape; null if never. */
  scraped_at_ms: number | null;
  /**
   * herd's own in_flight when running/waiting were last scraped (set by the registry; null/absent
   * when unknown). running + waiting beyond it is traffic herd did not send; without it a stale
   * scrape would count herd's requests that finished since as load.
   */
  in_flight_at_scrape?: number | null;
}

export interface Worker {
  /** Stable id, e.g. `gpu-01/sim-0`; the same engine keeps its id across restarts. */
  id: string;
  node: string;
  model: string;
  role: Role;
  kind: EngineKind;
  /** The engine's own base URL, e.g. http://127.0.0.1:8100 */
  url: string;
  state: WorkerState;
  load: WorkerLoad;
  /** Engine restarts since herd started it. */
  restarts: number;
}

export function emptyLoad(): WorkerLoad {
  return { in_flight: 0, running: null, waiting: null, kv_usage: null, scraped_at_ms: null };
}
