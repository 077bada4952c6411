// Filters run in order before the policy; each removes workers a request must not go to, and the
// router records which filter removed which worker (explain output, and the 503 message).
// The model filter comes first so `filtered` lists only the model's own workers.
import type { Filter } from "./types.ts";

export const servesModel: Filter = { name: "model", keep: (w, req) => w.model === req.model };

/** Only `ready` workers take traffic: not starting, draining, failed or stopped. */
export const stateReady: Filter = { name: "state", keep: (w) => w.state === "ready" };

/** Until P/D disaggregation lands, requests go to aggregated workers only. */
export const roleAggregated: Filter = { name: "role", keep: (w) => w.role === "aggregated" };

/** A retry never goes back to a worker that already failed this request. */
export const notExcluded: Filter = { name: "excluded", keep: (w, req) => !req.exclude.has(w.id) };

export const DEFAULT_FILTERS: readonly Filter[] = [servesModel, stateReady, roleAggregated, notExcluded];
