// The actuation seam: how the planner's actions reach engines. One node today (actuator-local.ts,
// over the supervisor); the cluster work adds one that sends them to other nodes' supervisors,
// fenced by the leader's term. Every implementation is idempotent (an action already under way on
// an engine is not repeated: one action in flight per engine), never stops an engine with requests
// in flight (it is drained first, and a stop of a busy engine only drains it), and reports the
// fleet it manages in the planner's own terms (types.ts).
import type { Action, Fleet } from "./types.ts";

/** What became of one action. `skipped`: already under way, unknown engine, or refused as unsafe. */
export type ActuationResult = { ok: true; engine: string | null; skipped?: string } | { ok: false; engine: string | null; error: string };

export interface Actuator {
  /** The engines of the planner's pools (every state but stopped-and-gone) and the hosts' GPUs. */
  fleet(): Fleet;
  /** Take one action; resolves once it is done (a start: once the engine is spawned, not ready). */
  act(action: Action): Promise<ActuationResult>;
  /** Call fn whenever an engine's state changes (e.g. one of a pool becomes ready); returns unsubscribe. */
  watch(fn: () => void): () => void;
  /** Milliseconds until `pool` has a ready engine, from the measured start and wake times; null = unknown. */
  predictReadyMs(pool: string): number | null;
}

/** The engine an action names (null for a start, which names a host). */
export function actionEngine(a: Action): string | null {
  return a.kind === "start" ? null : a.engine;
}

/** One line per action, for logs and the dry run. */
export function describeAction(a: Action): string {
  return a.kind === "start" ? `start ${a.pool} on ${a.host}` : `${a.kind} ${a.engine} (${a.pool})`;
}
