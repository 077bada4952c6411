// The stage contracts of the one routing pipeline (llm-d's filters → scorers → picker with
// Dynamo's units: a scorer returns one finite cost contribution in KV blocks, lower is better; the
// runner multiplies by the weight, sums, validates, times and explains). Every routing policy is a
// preset of these stages (../policies/*.ts).
//
// Stages are side-effect free while deciding: anything a stage remembers about a decision (the
// round-robin counter, a session's last worker, the blocks sent to a worker) is written in its
// `commit`, which the runner calls after the pick and never on a dry run (explain).
//
// Each stage declares the request inputs it reads (`needs`); the Router exposes the union
// (`router.needs`), so the frontend and preprocessing ask "does routing read block hashes?" instead
// of testing policy names.
import type { Rng } from "../../core/rng.ts";
import type { Worker } from "../../workers/worker.ts";
import type { Overlap } from "../../kv/indexer.ts";
import type { LoadView, RouteRequest } from "../types.ts";

/** The request inputs a stage reads. Absent = false. */
export interface Needs {
  /** The prompt's KV block hashes (src/preprocess must tokenize and hash every request). */
  blockHashes?: boolean;
  /** Worker load: herd's leases and the engines' scraped queues. */
  load?: boolean;
  /** The session id from the configured header. */
  sessionKey?: boolean;
  /** The worker's role (aggregated / prefill / decode). */
  role?: boolean;
}

export const NEEDS_KEYS = ["blockHashes", "load", "sessionKey", "role"] as const;

/** Union of stages' needs, with every key present (false when no stage reads it). */
export function unionNeeds(stages: readonly { readonly needs: Needs }[]): Required<Needs> {
  const out: Required<Needs> = { blockHashes: false, load: false, sessionKey: false, role: false };
  for (const s of stages) for (const k of NEEDS_KEYS) if (s.needs[k]) out[k] = true;
  return out;
}

/** Facts about one request, computed once per decision before any stage runs. */
export interface RequestFacts {
  req: RouteRequest;
  /** Prompt tokens (exact when preprocessed). */
  tokens: number;
  blockSize: number;
  /** Sequence hashes of the prompt's full blocks (empty when not preprocessed or not needed). */
  hashes: readonly bigint[];
  /** Blocks the prompt occupies: ceil(tokens / blockSize). */
  requestBlocks: number;
  /** Leading blocks each worker holds per medium (cache source; empty without one). */
  overlap: ReadonlyMap<string, Overlap>;
  /** The predicted (decision-time) part of the GPU overlap, per worker, shown in explain. */
  predicted: ReadonlyMap<string, number>;
  /** Leading prompt blocks already active (in flight) on each worker. */
  activeOverlap: ReadonlyMap<string, number>;
  load: LoadView;
  nowMs: number;
}

export type Terms = Record<string, number | string | null>;

/** What every stage has: a type name (config, explain, errors), its inputs, optional memory. */
export interface Stage {
  readonly type: string;
  readonly needs: Needs;
  /** Remember the decision (not called on dry runs). `chosen` is the picked worker. */
  commit?(chosen: Readonly<Worker>, facts: RequestFacts): void;
  /** The worker left or its engine restarted: drop what the stage remembers of it. */
  forget?(workerId: string): void;
  /** The router is being replaced: drop subscriptions. */
  close?(): void;
}

/**
 * Keeps a subset of the candidates. In a pipeline a filter that would keep none is skipped and
 * named in the reason (a guard must never 503); the Router's base filters (BASE_FILTERS) are the
 * exception: what they remove is listed in `decision.filtered` and nothing left is a 503.
 */
export interface Filter extends Stage {
  keep(candidates: readonly Readonly<Worker>[], facts: FilterFacts): Set<string>;
  /** Optional per-worker form of `keep` for filters that judge each worker alone (no Set built). */
  accepts?(worker: Readonly<Worker>, facts: FilterFacts): boolean;
}

/** What a filter may read: the request always; the other facts inside a pipeline. */
export type FilterFacts = Pick<RequestFacts, "req"> & Partial<RequestFacts>;

export interface ScoreResult {
  /** Cost in KV blocks before the weight; must be finite. */
  cost: number;
  terms: Terms;
}

export interface Scorer extends Stage {
  /**
   * `peers`: every candidate being scored in this decision (after the filters), for scorers that
   * normalise over the set (llm-d's queue scorer: min-max over waiting queues). The same array for
   * every call of one decision. Absent when a caller scores one worker alone (treated as `[worker]`).
   */
  score(worker: Readonly<Worker>, facts: RequestFacts, peers?: readonly Readonly<Worker>[]): ScoreResult;
  /** A clause for the reason, from the chosen row's terms (e.g. kv-cost's prefill/decode split). */
  explain?(terms: Terms, facts: RequestFacts): string;
}

/** One candidate as the picker sees it: summed weighted cost and the terms so far. */
export interface Row {
  worker: Readonly<Worker>;
  cost: number;
  /** The picker may add its own named terms (position, sampled, ring_rank, …). */
  terms: Terms;
}

export interface PickResult {
  /** Index into rows. */
  index: number;
  /** One sentence: why this row. */
  reason: string;
}

export interface Picker extends Stage {
  /** `rows` is non-empty; draws only from `rng` (the runner passes the live or the explain stream). */
  pick(rows: Row[], facts: RequestFacts, rng: Rng): PickResult;
}

export interface WeightedScorer {
  scorer: Scorer;
  weight: number;
}

/** Where a pipeline's overlap comes from: the event index, routing history, or both. */
export interface CacheSource extends Stage {
  /** `pairs`, when given: the same hashes as u32 halves (RouteRequest.blockHashPairs). */
  match(hashes: readonly bigint[], nowMs: number, pairs?: Uint32Array): { overlap: Map<string, Overlap>; predicted: Map<string, number> };
}

export interface Pipeline {
  /** Cache signal (kv index, prefix memory); absent = no overlap, block hashes not read. */
  source?: CacheSource;
  filters: Filter[];
  scorers: WeightedScorer[];
  picker: Picker;
}

/** Every stage of a pipeline, source first. */
export function stagesOf(p: Pipeline): Stage[] {
  return [...(p.source ? [p.source] : []), ...p.filters, ...p.scorers.map((s) => s.scorer), p.picker];
}
