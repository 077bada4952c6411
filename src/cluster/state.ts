// This node's durable cluster state in node.data_dir: the restart counter (incarnation) and, for the
// peers backend, Raft's persisted {currentTerm, votedFor}. Raft requires both to be on stable storage
// before a vote is answered or sent, "necessary to prevent the server from voting twice in the same
// term" (Ongaro 2014, Consensus: Bridging Theory and Practice, §3.4 / Figure 3.1).
import { join } from "node:path";
import { readJson, writeDurable } from "./durable.ts";

export interface DurableState {
  incarnation: number;
  term: number;
  votedFor: string | null;
}

export class StateStore {
  private state: DurableState;
  readonly path: string;

  constructor(dataDir: string) {
    this.path = join(dataDir, "cluster", "state.json");
    const s = readJson<Partial<DurableState>>(this.path) ?? {};
    this.state = {
      incarnation: Number.isSafeInteger(s.incarnation) ? s.incarnation! : 0,
      term: Number.isSafeInteger(s.term) ? s.term! : 0,
      votedFor: typeof s.votedFor === "string" ? s.votedFor : null,
    };
  }

  get(): Readonly<DurableState> {
    return this.state;
  }

  /** Raise the incarnation (once per start) and persist it. */
  bumpIncarnation(): number {
    this.save({ ...this.state, incarnation: this.state.incarnation + 1 });
    return this.state.incarnation;
  }

  /** Persist synchronously (fsync + rename) before returning: callers answer votes only afterwards. */
  save(next: DurableState): void {
    writeDurable(this.path, JSON.stringify(next));
    this.state = { ...next };
  }
}
