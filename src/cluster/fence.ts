// Fencing: every leader duty carries (term, leader); a host acts on it only if the term is not below
// the highest it has seen. A paused or partitioned ex-leader can still *believe* it leads, so its
// commands must be refused by whoever executes them (Kleppmann, "How to do distributed locking",
// 2016, §"Making the lock safe with fencing"). Terms: file term number, peers Raft term, etcd leader
// key create revision — each increases with every new leadership. Synchronous on purpose: the check
// and the state change happen in one turn, with no await in between.

export type FenceVerdict = { ok: true } | { ok: false; reason: "stale_term" | "conflicting_leader"; maxTerm: number; leader: string | null };

export class TermFence {
  constructor(
    private maxTerm = 0,
    private leaderOfMax: string | null = null,
    /** Persist a higher term before acting on it (e.g. StateStore); may throw, then nothing is admitted. */
    private readonly persist: (term: number, leader: string) => void = () => {},
  ) {}

  get term(): number {
    return this.maxTerm;
  }

  admit(term: number, leader: string): FenceVerdict {
    if (term < this.maxTerm) return { ok: false, reason: "stale_term", maxTerm: this.maxTerm, leader: this.leaderOfMax };
    if (term === this.maxTerm && this.leaderOfMax !== null && leader !== this.leaderOfMax)
      return { ok: false, reason: "conflicting_leader", maxTerm: this.maxTerm, leader: this.leaderOfMax }; // a bug: raise an alarm
    if (term > this.maxTerm) {
      this.persist(term, leader);
      this.maxTerm = term;
    }
    this.leaderOfMax = leader;
    return { ok: true };
  }
}
