// GET /admin/planner: desired vs actual per pool, the last decision's reason and terms, held
// requests, the measured ready-time prediction and the recent actions. `plannerRoute(service)` is
// the handler the integrator mounts (a Fetch handler: `app.get("/admin/planner", (c) => h(c.req.raw))`).
import type { AdminRoute } from "../http/admin-route.ts";
import type { Config } from "../config/types.ts";
import type { HoldQueue } from "./hold.ts";
import type { Decision, EngineState, Fleet } from "./types.ts";

export interface RecentAction {
  atMs: number;
  action: string;
  kind: string;
  pool: string;
  engine: string | null;
  reason: string;
  outcome: string;
  detail: string | null;
}

export interface PlannerPoolStatus {
  pool: string;
  entry: number;
  desired: number | null;
  actual: Record<EngineState, number>;
  reason: string | null;
  terms: Record<string, number | null>;
  /** SLA mode: the sizing term by term (planner.slo); absent otherwise. */
  explain?: string;
  held: { requests: number; prompt_tokens: number; bytes: number; oldest_wait_ms: number | null };
  predicted_ready_ms: number | null;
  engines: { id: string; state: EngineState; in_flight: number; for_ms: number }[];
}

export interface PlannerStatus {
  enabled: boolean;
  dry_run: boolean;
  tick_ms: number;
  ticks: number;
  last_tick_ms_ago: number | null;
  held: { requests: number; bytes: number };
  pools: PlannerPoolStatus[];
  recent_actions: (Omit<RecentAction, "atMs"> & { ms_ago: number })[];
}

export function plannerStatus(s: {
  config: Config;
  now: number;
  last: Decision | null;
  lastTickAtMs: number | null;
  ticks: number;
  fleet: Fleet;
  hold: HoldQueue;
  recent: readonly RecentAction[];
  predictReadyMs: (pool: string) => number | null;
}): PlannerStatus {
  const pools = s.config.planner.pools.map((p): PlannerPoolStatus => {
    const e = s.config.engines[p.engine]!;
    const id = `${e.model}/${e.role}`;
    const d = s.last?.pools.find((x) => x.pool === id);
    const engines = s.fleet.engines.filter((x) => x.pool === id && x.state !== "stopped");
    const actual: Record<EngineState, number> = { starting: 0, ready: 0, draining: 0, sleeping: 0, waking: 0, stopped: 0 };
    for (const x of engines) actual[x.state]++;
    const h = s.hold.summary(id);
    return {
      pool: id, entry: p.engine, desired: d?.desired ?? null, actual, reason: d?.reason ?? null, terms: d?.terms ?? {}, ...(d?.explain !== undefined ? { explain: d.explain } : {}),
      held: { requests: h.requests, prompt_tokens: h.promptTokens, bytes: h.bytes, oldest_wait_ms: h.oldestWaitMs },
      predicted_ready_ms: s.predictReadyMs(id),
      engines: engines.map((x) => ({ id: x.id, state: x.state, in_flight: x.inFlight, for_ms: Math.round(s.now - x.sinceMs) })),
    };
  });
  return {
    enabled: s.config.planner.enabled, dry_run: s.config.planner.dry_run, tick_ms: s.config.planner.tick_ms, ticks: s.ticks,
    last_tick_ms_ago: s.lastTickAtMs === null ? null : Math.round(s.now - s.lastTickAtMs),
    held: { requests: s.hold.size.count, bytes: s.hold.size.bytes }, pools,
    recent_actions: s.recent.map(({ atMs, ...r }) => ({ ...r, ms_ago: Math.round(s.now - atMs) })),
  };
}

/** The GET /admin/planner handler (JSON), for the admin app to mount. */
export function plannerRoute(service: { status(): PlannerStatus | Promise<PlannerStatus> }): (req: Request) => Promise<Response> {
  return async () => Response.json(await service.status());
}

/** GET /admin/planner, as an admin contribution (src/http/admin-route.ts): the cluster's planner on any node. */
export function plannerAdminRoutes(service: { status(): PlannerStatus | Promise<PlannerStatus> }): AdminRoute[] {
  return [{ method: "GET", path: "/planner", handle: plannerRoute(service) }];
}
