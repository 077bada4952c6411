// The planner as the request gate (src/request/gate.ts): every admitted request counts toward its
// pool's arrivals (a P/D model's: its prefill and its decode pool), and a request for a pool with no ready engine is held (HoldQueue: bounded count
// and bytes, a deadline) until an engine is ready — the planner is poked at once. Past the bounds or
// the deadline: 503 with Retry-After from the predicted ready time. In dry-run nothing is held: no
// engine would ever start for it.
import { ClientGone, type RequestGate } from "../request/gate.ts";
import type { WorkerRegistry } from "../workers/registry.ts";
import type { PlannerService } from "./service.ts";

export function plannerGate(planner: PlannerService, registry: WorkerRegistry, dryRun: boolean): RequestGate {
  return {
    arrived(model, promptTokens, maxTokens) {
      // A P/D model's request is work for both its pools (signals.ts): prefill and decode.
      for (const pool of planner.poolsFor(model)) planner.recordArrival(pool, promptTokens, maxTokens);
    },
    async pass(model, req) {
      const pool = planner.holdPoolFor(model);
      if (pool === null || dryRun || registry.eligible(model).length > 0) return;
      const outcome = await planner.hold.hold(pool, req);
      if (outcome === "release") return;
      if (outcome === "aborted") throw new ClientGone();
      throw planner.hold.unavailable(pool);
    },
  };
}
