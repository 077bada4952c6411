// The fault schedule, drawn from the seed before the run starts: `count` faults at uniform times
// in [0, spanMs), each with a kind, a target and a duration (or a restart delay). Every fault ends
// within the span, so the run's tail is quiet and the invariants that need quiet (all requests
// ended, streams caught up) can be asserted. Kinds:
//   kill_engine   an engine process dies; the supervisor restarts it after the duration
//   pause_engine  an engine hangs: no answer head, no token, until it resumes
//   kill_node     a node's process dies (its engines with it); restarted after the duration
//   pause_node    a node stops (SIGSTOP, GC): no timer fires, messages to it wait
//   partition     one node cut off from all others, or one link cut (the asymmetric case)
//   slow_link     a link (and the KV event path) gains extra delay
//   lost_kv       a share of live KV event batches is lost; sometimes the replay socket fails too
//   disk_full     the KV tier refuses stores
//   duplicate     assignments are delivered twice (retransmissions)
import type { Rng } from "../../core/rng.ts";

export const FAULT_KINDS = ["kill_engine", "pause_engine", "kill_node", "pause_node", "partition", "slow_link", "lost_kv", "disk_full", "duplicate"] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

export interface Fault {
  kind: FaultKind;
  atMs: number;
  durationMs: number;
  /** Node or engine index (partition: the isolated node; with `peer`, only that one link). */
  target: number;
  peer: number | null;
  /** lost_kv: share lost; slow_link: extra ms; duplicate: share duplicated. */
  amount: number;
  /** lost_kv: the replay socket fails as well. */
  replayDown: boolean;
}

export interface ScheduleOptions {
  count: number;
  spanMs: number;
  nodes: number;
  engines: number;
  /** Restrict the kinds drawn (tests of one subsystem); default all. */
  kinds?: readonly FaultKind[];
}

export function drawSchedule(rng: Rng, o: ScheduleOptions): Fault[] {
  const kinds = o.kinds ?? FAULT_KINDS;
  const out: Fault[] = [];
  for (let i = 0; i < o.count; i++) {
    const kind = kinds[rng.int(kinds.length)]!;
    const atMs = rng.int(Math.max(1, o.spanMs - 500));
    const maxDur = Math.max(100, o.spanMs - atMs);
    const durationMs = Math.min(maxDur, 100 + rng.int(kind === "pause_node" ? 4000 : 2500));
    const isEngine = kind === "kill_engine" || kind === "pause_engine";
    const target = rng.int(isEngine ? o.engines : o.nodes);
    let peer: number | null = null;
    if ((kind === "partition" && rng.float() < 0.5) || kind === "slow_link") peer = (target + 1 + rng.int(o.nodes - 1)) % o.nodes;
    const amount = kind === "lost_kv" ? 0.2 + 0.7 * rng.float() : kind === "slow_link" ? 50 + rng.int(400) : kind === "duplicate" ? 0.5 + 0.5 * rng.float() : 0;
    out.push({ kind, atMs, durationMs, target, peer, amount, replayDown: kind === "lost_kv" && rng.float() < 0.3 });
  }
  return out.sort((a, b) => a.atMs - b.atMs);
}

export function describeFault(f: Fault): string {
  const global = f.kind === "lost_kv" || f.kind === "disk_full" || f.kind === "duplicate";
  const who = global ? "all" : f.kind === "kill_engine" || f.kind === "pause_engine" ? `e${f.target}` : `n${f.target}${f.peer !== null ? `<->n${f.peer}` : ""}`;
  const amt = f.kind === "lost_kv" ? ` share ${f.amount.toFixed(2)}${f.replayDown ? " replay down" : ""}` : f.kind === "slow_link" ? ` +${f.amount} ms` : f.kind === "duplicate" ? ` share ${f.amount.toFixed(2)}` : "";
  return `${f.kind} ${who} for ${f.durationMs} ms${amt}`;
}
