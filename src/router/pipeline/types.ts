// The pipeline's stage contracts (llm-d's filters → scorers → picker, routers.md §2.1, with
// Dynamo's units, style-anchors §1.3): a filter keeps or drops a worker given the whole candidate
// set; a scorer returns one finite cost contribution in KV blocks (lower is better) plus the named
// terms it used; the runner multiplies by the configured weight, sums, validates and explains; a
// picker turns the summed costs into an index. Stages are side-effect free: remembering a decision
// (prefix memory, session bindings) is the runner's job after the pick, and only when not a dry run.
import type { Rng } from "../../core/rng.ts";
import type { Worker } from "../../workers/worker.ts";
import type { Overlap } from "../../kv/indexer.ts";
import type { LoadView, RouteRequest } from "../types.ts";

/** Facts about one request, computed once per decision before any stage runs. */
export interface RequestFacts {
  req: RouteRequest;
  /** Prompt tokens (exact when preprocessed). */
  tokens: number;
  blockSize: number;
  /** Sequence hashes of the prompt's full blocks (empty when not preprocessed). */
  hashes: readonly bigint[];
  /** Blocks the prompt occupies: ceil(tokens / blockSize). */
  requestBlocks: number;
  /** Leading blocks each worker holds per medium (event index, raised by predicted entries). */
  overlap: ReadonlyMap<string, Overlap>;
  /** The predicted (decision-time) part of the GPU overlap, per worker, shown in explain. */
  predicted: ReadonlyMap<string, number>;
  /** Leading prompt blocks already active (in flight) on each worker. */
  activeOverlap: ReadonlyMap<string, number>;
  /** The worker this request's session was last routed to, if any. */
  sessionWorker: string | null;
  load: LoadView;
  nowMs: number;
}

export interface PipelineFilter {
  readonly type: string;
  /** Workers to keep; the runner skips a filter that would keep none (a guard must never 503). */
  keep(candidates: readonly Readonly<Worker>[], facts: RequestFacts): Set<string>;
}

export type Terms = Record<string, number | string | null>;

export interface ScoreResult {
  /** Cost in KV blocks before the weight; must be finite. */
  cost: number;
  terms: Terms;
}

export interface Scorer {
  readonly type: string;
  score(worker: Readonly<Worker>, facts: RequestFacts): ScoreResult;
}

export interface Picker {
  readonly type: string;
  /** Index into `costs` (one per candidate, same order). */
  pick(costs: readonly number[], rng: Rng): number;
}

export interface WeightedScorer {
  scorer: Scorer;
  weight: number;
}

export interface Pipeline {
  filters: PipelineFilter[];
  scorers: WeightedScorer[];
  picker: Picker;
}
