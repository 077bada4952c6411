// The router's public surface, for the frontend, admin and daemon. Import from here.
export { Router, SESSION_ID_MAX_CHARS, type RouteResult, type RouterObserver, type RouterOptions } from "./router.ts";
export type { Lease, PrefillLoad } from "./lease.ts";
export { RetryBudget, retryable, type Failure, type FailureKind } from "./retry.ts";
export { effectiveLoad } from "./load.ts";
export { POLICY_FACTORIES, policyFactory } from "./policies/index.ts";
export { BASE_FILTERS } from "./pipeline/filters.ts";
export { unionNeeds, type Needs } from "./pipeline/types.ts";
export { presetNeeds } from "./policies/index.ts";
export type { CandidateExplain, Decision, FilteredOut, Filter, Pick, Policy, PolicyFactory, RouteCtx, RouteRequest } from "./types.ts";
export { OutlierDetector, type Ejection } from "./outlier.ts";
