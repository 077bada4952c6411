// The planner's Prometheus series (prefix `herd_planner_`, units last, `_total` for counters; the
// style of src/metrics/names.ts), registered in the registry the daemon serves on /metrics. Labels
// are bounded: pools are the configured ones, reasons and action kinds are closed sets.
import { Counter, Gauge, type Registry } from "prom-client";
import type { HoldRejection } from "./hold.ts";
import type { Action, PoolDecision } from "./types.ts";

export const PLANNER_METRIC = {
  ticksTotal: "herd_planner_ticks_total",
  decisionsTotal: "herd_planner_decisions_total",
  actionsTotal: "herd_planner_actions_total",
  desiredEngines: "herd_planner_desired_engines",
  currentEngines: "herd_planner_current_engines",
  demandEngines: "herd_planner_demand_engines",
  heldRequests: "herd_planner_held_requests",
  holdRejectedTotal: "herd_planner_hold_rejected_total",
  holdWaitSeconds: "herd_planner_hold_wait_seconds_total",
  holdReleasedTotal: "herd_planner_hold_released_total",
  assignmentsRefusedTotal: "herd_planner_assignments_refused_total",
} as const;

export type ActionOutcome = "ok" | "skipped" | "failed" | "dry_run";

export class PlannerMetrics {
  private readonly ticks: Counter<"trigger">;
  private readonly decisions: Counter<"pool" | "reason">;
  private readonly actions: Counter<"pool" | "kind" | "outcome">;
  private readonly desired: Gauge<"pool">;
  private readonly current: Gauge<"pool">;
  private readonly demand: Gauge<"pool">;
  private readonly held: Gauge<"pool">;
  private readonly rejected: Counter<"pool" | "reason">;
  private readonly waited: Counter<"pool">;
  private readonly released: Counter<"pool">;
  private readonly refusedAssignments: Counter<"reason">;

  constructor(registry: Registry) {
    const registers = [registry];
    const counter = <L extends string>(name: string, help: string, labelNames: readonly L[]) => new Counter<L>({ name, help, labelNames, registers });
    const gauge = <L extends string>(name: string, help: string, labelNames: readonly L[]) => new Gauge<L>({ name, help, labelNames, registers });
    this.ticks = counter(PLANNER_METRIC.ticksTotal, "Planner decisions run, by trigger (timer, or poke: a request held).", ["trigger"]);
    this.decisions = counter(PLANNER_METRIC.decisionsTotal, "Per-pool decisions by reason (hold, scale_up, scale_down, sleep_idle, …).", ["pool", "reason"]);
    this.actions = counter(PLANNER_METRIC.actionsTotal, "Planner actions by kind (start, wake, drain, stop, sleep) and outcome.", ["pool", "kind", "outcome"]);
    this.desired = gauge(PLANNER_METRIC.desiredEngines, "Engines the planner wants serving in the pool.", ["pool"]);
    this.current = gauge(PLANNER_METRIC.currentEngines, "Engines serving or coming (ready, starting, waking) in the pool.", ["pool"]);
    this.demand = gauge(PLANNER_METRIC.demandEngines, "Fractional engines the pool's demand needs at the target utilisation.", ["pool"]);
    this.held = gauge(PLANNER_METRIC.heldRequests, "Requests held for the pool, waiting for a ready engine.", ["pool"]);
    this.rejected = counter(PLANNER_METRIC.holdRejectedTotal, "Requests the hold queue answered 503 (count, bytes, timeout, disabled).", ["pool", "reason"]);
    this.waited = counter(PLANNER_METRIC.holdWaitSeconds, "Seconds released requests spent held (divide by released for the mean).", ["pool"]);
    this.released = counter(PLANNER_METRIC.holdReleasedTotal, "Held requests released to the router once an engine was ready.", ["pool"]);
    this.refusedAssignments = counter(PLANNER_METRIC.assignmentsRefusedTotal, "Leader assignments this node refused (stale_term, conflicting_leader, no_lease, unknown_term, bad_assignment): the term fence at work.", ["reason"]);
  }

  tick(trigger: "timer" | "poke"): void {
    this.ticks.inc({ trigger });
  }

  decision(d: PoolDecision, heldRequests: number): void {
    this.decisions.inc({ pool: d.pool, reason: d.reason });
    this.desired.set({ pool: d.pool }, d.desired);
    this.current.set({ pool: d.pool }, d.current);
    const demand = d.terms.demand;
    if (typeof demand === "number") this.demand.set({ pool: d.pool }, demand);
    this.held.set({ pool: d.pool }, heldRequests);
  }

  action(a: Action, outcome: ActionOutcome): void {
    this.actions.inc({ pool: a.pool, kind: a.kind, outcome });
  }

  assignmentRefused(why: string): void {
    this.refusedAssignments.inc({ reason: why });
  }

  holdRejected(pool: string, why: HoldRejection): void {
    this.rejected.inc({ pool, reason: why });
  }

  holdReleased(pool: string, waitedMs: number): void {
    this.released.inc({ pool });
    this.waited.inc({ pool }, waitedMs / 1000);
  }
}
