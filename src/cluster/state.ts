// This node's durable cluster state in node.data_dir: the restart counter (incarnation) and, for the
// peers backend, Raft's persisted {currentTerm, votedFor}. Raft requires both to be on stable storage
// before a vote is answered or sent, "necessary to prevent the server from voting twice in the same
// term" (Ongaro 2014, Consensus: Bridging Theory and Practice, §3.4 / Figure 3.1).
import { join } from "node:path";
import { HerdError } from "../core/errors.ts";
import { readJson, writeDurable } from "./durable.ts";
import { TERM_MAX } from "./election.ts";

/** A field of state.json beyond TERM_MAX was forged or corrupted: refuse to start rather than guess. */
function bounded(path: string, field: string, v: unknown): number {
  if (v === undefined) return 0;
  if (Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) <= TERM_MAX) return v as number;
  throw new HerdError(
    500,
    "server_error",
    `${path}: ${field} ${JSON.stringify(v)} is not an integer in [0, ${TERM_MAX}] (forged or corrupt); set it to the term the other nodes report (GET /cluster/v1/view) + 1 with votedFor null, or remove the file, then start again`,
    "cluster_state_invalid",
  );
}

export interface DurableState {
  incarnation: number;
  term: number;
  votedFor: string | null;
}

/**
 * Where state.json lives: the disk (tmp + fsync + rename) by default; the fault simulation
 * (src/simulate/faults) passes an in-memory disk that survives a simulated node restart.
 */
export interface StateFiles {
  read(path: string): unknown;
  write(path: string, data: string): void;
}
const DISK: StateFiles = { read: (p) => readJson(p), write: (p, d) => writeDurable(p, d) };

export class StateStore {
  private state: DurableState;
  readonly path: string;

  constructor(
    dataDir: string,
    private readonly files: StateFiles = DISK,
  ) {
    this.path = join(dataDir, "cluster", "state.json");
    const s = (files.read(this.path) as Partial<DurableState> | undefined) ?? {};
    this.state = {
      incarnation: bounded(this.path, "incarnation", s.incarnation),
      term: bounded(this.path, "term", s.term),
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
    bounded(this.path, "term", next.term); // never persist a term the next start would refuse
    bounded(this.path, "incarnation", next.incarnation);
    this.files.write(this.path, JSON.stringify(next));
    this.state = { ...next };
  }
}
