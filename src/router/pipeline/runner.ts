// The pipeline runner: the one Policy every preset is. It gathers the request's facts once (the
// cache source's match, only when a stage reads block hashes), runs the filters as guards, the
// weighted scorers and the picker, explains every candidate term by term with a reason assembled
// from the stages' own words, and only then, outside a dry run, lets the stages commit (the
// round-robin counter, session bindings, the blocks sent to the worker).
// The runner owns validation and timing: a non-finite cost names its scorer and worker, a picker
// row out of range names its picker (docs/references.md#style-1.3); `timings` = {match_ms, score_ms}.
import { invariant } from "../../core/errors.ts";
import type { Worker } from "../../workers/worker.ts";
import type { CandidateExplain, LoadView, Pick, Policy, RouteCtx, RouteRequest } from "../types.ts";
import { loadTerms } from "../load.ts";
import { r3 } from "./scorers.ts";
import { stagesOf, unionNeeds, type CacheSource, type Needs, type Pipeline, type RequestFacts, type Row, type Stage, type Terms } from "./types.ts";

export type { CacheSource };

/** A LoadView with nothing booked: for policies built without a Router (tests, benchmarks). */
export const NO_LOAD: LoadView = {
  prefilling: () => ({ requests: 0, tokens: 0 }),
  activeBlocks: () => 0,
  activeOverlaps: () => new Map(),
};

const DEFAULT_BLOCK_SIZE = 16;
const NO_MAP: ReadonlyMap<string, never> = new Map<string, never>();
const NO_HASHES: readonly bigint[] = [];
const NO_STRINGS: string[] = []; // never pushed to: only a pipeline with filters pushes, and it gets its own

export class PipelinePolicy implements Policy {
  readonly needs: Required<Needs>;
  private readonly stages: Stage[];
  private readonly commits: Stage[];

  constructor(
    readonly name: string,
    private readonly pipeline: Pipeline,
    private readonly load: LoadView = NO_LOAD,
  ) {
    this.stages = stagesOf(pipeline);
    this.commits = this.stages.filter((s) => s.commit);
    this.needs = unionNeeds(this.stages);
  }

  pick(req: RouteRequest, candidates: readonly Readonly<Worker>[], ctx: RouteCtx): Pick {
    // Timed only where there is a match to time (timings are reported for cache-reading pipelines).
    const timed = this.pipeline.source !== undefined;
    const t0 = timed ? performance.now() : 0;
    const facts = this.facts(req, ctx.nowMs);
    const t1 = timed ? performance.now() : 0;

    // (allocated only for a pipeline with filters: round-robin and random have none, and run per request)
    const droppedBy = this.pipeline.filters.length > 0 ? new Map<string, string>() : NO_MAP;
    const skipped: string[] = this.pipeline.filters.length > 0 ? [] : NO_STRINGS;
    let live = candidates;
    for (const f of this.pipeline.filters) {
      const keep = f.keep(live, facts);
      if (keep.size === 0) {
        skipped.push(f.type);
        continue;
      }
      const next: Readonly<Worker>[] = [];
      for (const w of live) {
        if (keep.has(w.id)) next.push(w);
        else (droppedBy as Map<string, string>).set(w.id, f.type);
      }
      live = next;
    }

    const scorers = this.pipeline.scorers;
    const rows: Row[] = [];
    for (const w of live) {
      let total = 0;
      const t: Terms = loadTerms(w);
      for (const { scorer, weight } of scorers) {
        const s = scorer.score(w, facts, live);
        invariant(Number.isFinite(s.cost), `scorer ${scorer.type} gave a non-finite cost (${s.cost}) for worker ${w.id}`);
        Object.assign(t, s.terms);
        t[`${scorer.type}_weighted`] = r3(weight * s.cost);
        total += weight * s.cost;
      }
      if (scorers.length > 0) t.cost = r3(total);
      rows.push({ worker: w, cost: total, terms: t });
    }
    const picker = this.pipeline.picker;
    const { index: i, reason: why } = picker.pick(rows, facts, ctx.rng);
    invariant(Number.isInteger(i) && i >= 0 && i < rows.length, `picker ${picker.type} returned row ${i} of ${rows.length}`);
    const chosen = rows[i]!.worker;
    const t2 = timed ? performance.now() : 0;

    if (!ctx.dryRun) for (const s of this.commits) s.commit!(chosen, facts);

    // Nothing dropped: rows are the candidates in order, so no id → terms Map is needed.
    const explained: CandidateExplain[] = live === candidates ? rows.map((r) => ({ worker: r.worker.id, node: r.worker.node, terms: r.terms })) : explainAll(candidates, rows, droppedBy);
    const pick: Pick = { chosen: chosen.id, candidates: explained, reason: this.reason(why, rows[i]!.terms, facts, droppedBy.size, skipped) };
    if (this.pipeline.source) {
      pick.timings = { match_ms: t1 - t0, score_ms: t2 - t1 };
      pick.predictedCachedTokens = Math.min(facts.tokens, (facts.overlap.get(chosen.id)?.gpu ?? 0) * facts.blockSize);
      pick.request = { tokens: facts.tokens, block_size: facts.blockSize, hashed_blocks: facts.hashes.length, request_blocks: facts.requestBlocks };
    }
    return pick;
  }

  /** The picker's sentence, the scorers' clauses on the chosen row, then what the filters did. */
  private reason(why: string, chosen: Terms, facts: RequestFacts, dropped: number, skipped: readonly string[]): string {
    if (this.pipeline.scorers.length === 0 && dropped === 0 && skipped.length === 0) return why;
    const clauses: string[] = [];
    for (const { scorer } of this.pipeline.scorers) if (scorer.explain) clauses.push(scorer.explain(chosen, facts));
    return (
      why +
      (clauses.length > 0 ? ` (${clauses.join("; ")})` : "") +
      (dropped > 0 ? `; ${dropped} dropped by filters` : "") +
      (skipped.length > 0 ? `; filter ${skipped.join(", ")} skipped (would drop every worker)` : "")
    );
  }

  private facts(req: RouteRequest, nowMs: number): RequestFacts {
    return gatherFacts(req, nowMs, this.load, this.needs.blockHashes, this.pipeline.source);
  }

  forgetWorker(workerId: string): void {
    for (const s of this.stages) s.forget?.(workerId);
  }

  close(): void {
    for (const s of this.stages) s.close?.();
  }
}

/** Every candidate's terms: a row's, or why a pipeline filter dropped it. */
function explainAll(candidates: readonly Readonly<Worker>[], rows: readonly Row[], droppedBy: ReadonlyMap<string, string>): CandidateExplain[] {
  const termsOf = new Map(rows.map((r) => [r.worker.id, r.terms]));
  return candidates.map((w) => ({
    worker: w.id,
    node: w.node,
    terms: termsOf.get(w.id) ?? { filtered_by: droppedBy.get(w.id) ?? "unknown", in_flight: w.load.in_flight, running: w.load.running, waiting: w.load.waiting },
  }));
}

/**
 * A request's facts, once per decision: block hashes only when a stage reads them, the cache
 * source's match (overlap, predicted), and the prompt blocks already active per worker.
 */
export function gatherFacts(req: RouteRequest, nowMs: number, load: LoadView, readHashes: boolean, source?: CacheSource): RequestFacts {
  const hashes = readHashes ? (req.blockHashes ?? NO_HASHES) : NO_HASHES;
  const blockSize = req.blockSize && req.blockSize > 0 ? req.blockSize : DEFAULT_BLOCK_SIZE;
  const tokens = Math.max(0, req.promptTokens, hashes.length * blockSize);
  const pairs = req.blockHashPairs && req.blockHashPairs.length >= 2 * hashes.length ? req.blockHashPairs : undefined;
  const { overlap, predicted } = source ? source.match(hashes, nowMs, pairs) : { overlap: NO_MAP, predicted: NO_MAP };
  return {
    req,
    tokens,
    blockSize,
    hashes,
    requestBlocks: Math.ceil(tokens / blockSize),
    overlap,
    predicted,
    activeOverlap: hashes.length > 0 ? load.activeOverlaps(hashes) : NO_MAP,
    load,
    nowMs,
  };
}
