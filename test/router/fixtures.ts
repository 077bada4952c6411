// Fixtures for router tests: workers, configs and requests with sensible defaults.
import type { RouterConfig } from "../../src/config/types.ts";
import { defaultConfig } from "../../src/config/index.ts";
import { emptyLoad, type Worker, type WorkerLoad } from "../../src/workers/worker.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import type { RouteRequest } from "../../src/router/types.ts";

/** The KV-aware sections (kv, prefix, pipeline) at their schema defaults. */
const { kv, prefix, pipeline, pd, outlier, predicted } = defaultConfig({ hostname: "test", dataDir: "/tmp/herd-test" }).router;
const kvDefaults = { kv, prefix, pipeline, pd, outlier, predicted };

export function routerConfig(over: Partial<RouterConfig> = {}): RouterConfig {
  return {
    policy: "round-robin",
    seed: 42,
    session: { header: "x-session-id", load_factor: 1.25, virtual_nodes: 100 },
    retry: { attempts: 1, budget_ratio: 0.2, min_retries_per_window: 3 },
    metrics_scrape_interval_ms: 1000,
    ...kvDefaults,
    ...over,
  };
}

export function worker(id: string, over: Partial<Omit<Worker, "load">> & { load?: Partial<WorkerLoad> } = {}): Worker {
  const { load, ...rest } = over;
  return {
    id,
    node: "n1",
    model: "m",
    role: "aggregated",
    kind: "sim",
    url: `http://127.0.0.1:1/${id}`,
    state: "ready",
    restarts: 0,
    ...rest,
    load: { ...emptyLoad(), ...load },
  };
}

export function workers(n: number, over: Parameters<typeof worker>[1] = {}): Worker[] {
  return Array.from({ length: n }, (_, i) => worker(`w${i}`, over));
}

export function registryWith(ws: Worker[]): WorkerRegistry {
  const r = new WorkerRegistry();
  for (const w of ws) r.upsert(w);
  return r;
}

export function req(over: Partial<RouteRequest> = {}): RouteRequest {
  return { model: "m", sessionId: null, promptTokens: 10, exclude: new Set(), ...over };
}
