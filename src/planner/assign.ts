// The node side of one planner for the cluster (issue 20): an assignment from the leader passes
// this node's lease view (the term and leader it knows) and a TermFence (src/cluster/fence.ts:
// never below the highest term seen), then this node's own actuator, at most once per assignment
// id. Refusals are counted (herd_planner_assignments_refused_total): a deposed leader that keeps
// sending is refused, never obeyed. Synchronous up to the actuator call.
import type { TermFence } from "../cluster/fence.ts";
import type { ActuationResult, Actuator } from "./actuator.ts";
import type { Action } from "./types.ts";

export interface Assignment {
  /** `leader/term/seq`: applied at most once per node. */
  id: string;
  term: number;
  leader: string;
  action: Action;
}

export type RefusalReason = "stale_term" | "conflicting_leader" | "no_lease" | "unknown_term" | "bad_assignment";

export type AssignmentReply = { ok: true; result: ActuationResult; duplicate: boolean } | { ok: false; refused: RefusalReason; term: number };

/** A node's view of the election: the leader whose lease it holds fresh, and its term; null when none. */
export type LeaseView = () => { term: number; leader: string } | null;

const REMEMBERED_IDS = 1024;

/** The node side: assignments pass the fence, then this node's own actuator, once per id. */
export class AssignmentApplier {
  private readonly applied = new Map<string, Promise<ActuationResult>>();
  readonly refused: Record<RefusalReason, number> = { stale_term: 0, conflicting_leader: 0, no_lease: 0, unknown_term: 0, bad_assignment: 0 };
  duplicates = 0;

  constructor(
    private readonly o: { fence: TermFence; lease: LeaseView; local: Actuator; onRefused?: (why: RefusalReason) => void; onApplied?: (a: Assignment, r: ActuationResult) => void },
  ) {}

  /** Synchronous up to the actuator call: the checks and the id's record happen in one turn. */
  async apply(a: Assignment): Promise<AssignmentReply> {
    const refuse = (why: RefusalReason): AssignmentReply => {
      this.refused[why]++;
      this.o.onRefused?.(why);
      return { ok: false, refused: why, term: Math.max(this.o.fence.term, this.o.lease()?.term ?? 0) };
    };
    if (!isAssignment(a)) return refuse("bad_assignment");
    const lease = this.o.lease();
    if (lease !== null && a.term < lease.term) return refuse("stale_term");
    if (lease === null) return refuse("no_lease");
    if (a.term > lease.term) return refuse("unknown_term"); // this node has not seen that leader's beat yet: the leader retries
    if (a.leader !== lease.leader) return refuse("conflicting_leader");
    const v = this.o.fence.admit(a.term, a.leader);
    if (!v.ok) return refuse(v.reason);
    const known = this.applied.get(a.id);
    if (known) {
      this.duplicates++;
      return { ok: true, result: await known, duplicate: true };
    }
    const p = this.o.local.act(a.action);
    this.applied.set(a.id, p);
    if (this.applied.size > REMEMBERED_IDS) this.applied.delete(this.applied.keys().next().value!);
    const result = await p;
    this.o.onApplied?.(a, result);
    return { ok: true, result, duplicate: false };
  }

  get refusedTotal(): number {
    return Object.values(this.refused).reduce((n, x) => n + x, 0);
  }
}

function isAssignment(a: unknown): a is Assignment {
  if (typeof a !== "object" || a === null) return false;
  const x = a as Record<string, unknown>;
  const act = x.action as Record<string, unknown> | undefined;
  if (typeof x.id !== "string" || x.id.length > 256 || !Number.isSafeInteger(x.term) || typeof x.leader !== "string" || typeof act !== "object" || act === null) return false;
  if (typeof act.pool !== "string") return false;
  if (act.kind === "start") return typeof act.host === "string";
  return ["wake", "drain", "stop", "sleep"].includes(act.kind as string) && typeof act.engine === "string";
}
