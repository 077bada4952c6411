// The invariants, checked as things happen and after every instant of the run (run.ts):
//   I1 at most one leader per term (every node that ever saw itself leader, by term);
//   I2 at most one persisted vote per (voter, term) (Raft's votedFor, read off the node's disk);
//   I3 no double actuation: an action is carried out at most once per node, and a node never
//      acts for a term below one it already acted for (the TermFence), nor for a leader other
//      than that term's leader;
//   I4 no request lost: each ends exactly once, by its deadline, with a full answer or an error the
//      client can see (an error status, or an error event after the commit point); at the end none
//      is left and every lease is released;
//   I5 no stale block credited: whenever a worker's event stream has caught up with its live
//      engine, every block the router's index credits to it on GPU is one the engine holds;
//   I6 the tier never loads a block it does not hold.
// A violation is logged at the instant it is found and ends the seed's verdict (the run goes on,
// so the log shows what followed).
import type { EventLog } from "./event-log.ts";

export type InvariantName = "one_leader_per_term" | "one_vote_per_term" | "no_double_actuation" | "fenced_actuation" | "request_lost" | "request_hung" | "lease_leak" | "stale_block" | "tier_wrong_block";

export interface Violation {
  invariant: InvariantName;
  atMs: number;
  detail: string;
}

export class Checker {
  readonly violations: Violation[] = [];
  /** Checks evaluated (one per invariant per evaluation), for the bench's figures. */
  checks = 0;
  private readonly leaderOf = new Map<number, string>();
  private readonly votes = new Map<string, string>();
  private readonly acted = new Map<string, number>();
  private readonly actedTerm = new Map<string, number>();

  constructor(
    private readonly now: () => number,
    private readonly log: EventLog,
  ) {}

  fail(invariant: InvariantName, detail: string): void {
    if (this.violations.length >= 32) return;
    this.violations.push({ invariant, atMs: this.now(), detail });
    this.log.add(`VIOLATION ${invariant}: ${detail}`);
  }

  expect(ok: boolean, invariant: InvariantName, detail: () => string): void {
    this.checks++;
    if (!ok) this.fail(invariant, detail());
  }

  leader(term: number, node: string): void {
    const known = this.leaderOf.get(term);
    this.expect(known === undefined || known === node, "one_leader_per_term", () => `term ${term}: ${known} and ${node}`);
    if (known === undefined) this.leaderOf.set(term, node);
  }

  vote(voter: string, term: number, candidate: string): void {
    const k = `${voter}@${term}`;
    const known = this.votes.get(k);
    this.expect(known === undefined || known === candidate, "one_vote_per_term", () => `${voter} voted for ${known} and ${candidate} in term ${term}`);
    if (known === undefined) this.votes.set(k, candidate);
  }

  actuated(node: string, action: string, term: number, leader: string): void {
    const k = `${node} ${action}`;
    const n = (this.acted.get(k) ?? 0) + 1;
    this.acted.set(k, n);
    this.expect(n === 1, "no_double_actuation", () => `${node} carried out ${action} ${n} times`);
    const before = this.actedTerm.get(node) ?? 0;
    this.expect(term >= before, "fenced_actuation", () => `${node} acted for term ${term} after term ${before}`);
    this.actedTerm.set(node, Math.max(before, term));
    const l = this.leaderOf.get(term);
    this.expect(l === leader, "fenced_actuation", () => `${node} acted for ${leader} in term ${term}, whose leader is ${l ?? "nobody"}`);
  }

  get actuations(): number {
    return this.acted.size;
  }

  get terms(): number {
    return this.leaderOf.size;
  }
}
