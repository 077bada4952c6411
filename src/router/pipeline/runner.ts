// The pipeline runner: one Policy that gathers the request's facts once (match), runs filters,
// weighted scorers and the picker (score), explains every candidate term by term, and only then,
// outside a dry run, remembers the decision (the cache source's record, the session binding).
// The runner owns validation: a non-finite cost names its scorer and worker (style-anchors §1.3).
import { invariant } from "../../core/errors.ts";
import type { Worker } from "../../workers/worker.ts";
import type { Overlap } from "../../kv/indexer.ts";
import type { CandidateExplain, LoadView, Pick, Policy, RouteCtx, RouteRequest } from "../types.ts";
import { r3 } from "./scorers.ts";
import type { Pipeline, RequestFacts, Terms } from "./types.ts";

/** Where a policy's cache signal comes from: the event index, routing history, or both. */
export interface CacheSource {
  /** `pairs`, when given: the same hashes as u32 halves (RouteRequest.blockHashPairs). */
  match(hashes: readonly bigint[], nowMs: number, pairs?: Uint32Array): { overlap: Map<string, Overlap>; predicted: Map<string, number> };
  /** The request's blocks were sent to `worker` (not called on dry runs). */
  record(worker: string, hashes: readonly bigint[], nowMs: number): void;
  /** Forget what was recorded for a worker (it left or restarted). */
  forget(worker: string): void;
}

/** A LoadView with nothing booked: for policies built without a Router (tests, benchmarks). */
export const NO_LOAD: LoadView = {
  prefilling: () => ({ requests: 0, tokens: 0 }),
  activeBlocks: () => 0,
  activeOverlaps: () => new Map(),
};

/** Session bindings kept (LRU); a forgotten session simply loses its preference. */
export const SESSION_BINDINGS_MAX = 65_536;
const DEFAULT_BLOCK_SIZE = 16;

export class PipelinePolicy implements Policy {
  private readonly sessions = new Map<string, string>();

  constructor(
    readonly name: string,
    private readonly pipeline: Pipeline,
    private readonly source: CacheSource,
    private readonly load: LoadView = NO_LOAD,
  ) {}

  pick(req: RouteRequest, candidates: readonly Readonly<Worker>[], ctx: RouteCtx): Pick {
    const t0 = performance.now();
    const facts = this.facts(req, ctx.nowMs);
    const t1 = performance.now();

    const droppedBy = new Map<string, string>();
    const skipped: string[] = [];
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
        else droppedBy.set(w.id, f.type);
      }
      live = next;
    }

    const costs: number[] = [];
    const terms: Terms[] = [];
    for (const w of live) {
      let total = 0;
      const t: Terms = {};
      for (const { scorer, weight } of this.pipeline.scorers) {
        const s = scorer.score(w, facts);
        invariant(Number.isFinite(s.cost), `scorer ${scorer.type} gave a non-finite cost (${s.cost}) for worker ${w.id}`);
        Object.assign(t, s.terms);
        t[`${scorer.type}_weighted`] = r3(weight * s.cost);
        total += weight * s.cost;
      }
      t.cost = r3(total);
      costs.push(total);
      terms.push(t);
    }
    const i = this.pipeline.picker.pick(costs, ctx.rng);
    invariant(i >= 0 && i < live.length, `picker ${this.pipeline.picker.type} returned row ${i} of ${live.length}`);
    const chosen = live[i]!;
    const t2 = performance.now();

    if (!ctx.dryRun) {
      this.source.record(chosen.id, facts.hashes, ctx.nowMs);
      if (req.sessionId) this.bindSession(req.sessionId, chosen.id);
    }

    const termsOf = new Map(live.map((w, k) => [w.id, terms[k]!]));
    const explained: CandidateExplain[] = candidates.map((w) => ({
      worker: w.id,
      node: w.node,
      terms: termsOf.get(w.id) ?? { filtered_by: droppedBy.get(w.id) ?? "unknown", in_flight: w.load.in_flight, running: w.load.running, waiting: w.load.waiting },
    }));
    const o = facts.overlap.get(chosen.id) ?? { gpu: 0, cpu: 0, disk: 0 };
    const gpu = o.gpu;
    const ct = terms[i]!;
    const reason =
      `${this.pipeline.picker.type === "softmax" && live.length > 1 && Math.min(...costs) !== costs[i] ? "sampled" : "lowest"} cost ${ct.cost}` +
      ` among ${live.length} worker(s)` +
      (ct.prefill_blocks !== undefined
        ? ` (prefill ${ct.prefill_blocks} + decode ${ct.decode_blocks} blocks; overlap gpu/cpu/disk ${o.gpu}/${o.cpu}/${o.disk} of ${facts.requestBlocks} blocks)`
        : "") +
      (droppedBy.size > 0 ? `; ${droppedBy.size} dropped by filters` : "") +
      (skipped.length > 0 ? `; filter ${skipped.join(", ")} skipped (would drop every worker)` : "");
    return {
      chosen: chosen.id,
      candidates: explained,
      reason,
      timings: { match_ms: t1 - t0, score_ms: t2 - t1 },
      predictedCachedTokens: Math.min(facts.tokens, gpu * facts.blockSize),
      request: { tokens: facts.tokens, block_size: facts.blockSize, hashed_blocks: facts.hashes.length, request_blocks: facts.requestBlocks },
    };
  }

  private facts(req: RouteRequest, nowMs: number): RequestFacts {
    const hashes = req.blockHashes ?? [];
    const blockSize = req.blockSize && req.blockSize > 0 ? req.blockSize : DEFAULT_BLOCK_SIZE;
    const tokens = Math.max(0, req.promptTokens, hashes.length * blockSize);
    const pairs = req.blockHashPairs && req.blockHashPairs.length >= 2 * hashes.length ? req.blockHashPairs : undefined;
    const { overlap, predicted } = this.source.match(hashes, nowMs, pairs);
    const sessionWorker = req.sessionId ? (this.sessions.get(req.sessionId) ?? null) : null;
    return {
      req,
      tokens,
      blockSize,
      hashes,
      requestBlocks: Math.ceil(tokens / blockSize),
      overlap,
      predicted,
      activeOverlap: hashes.length > 0 ? this.load.activeOverlaps(hashes) : new Map(),
      sessionWorker,
      load: this.load,
      nowMs,
    };
  }

  forgetWorker(workerId: string): void {
    this.source.forget(workerId);
  }

  private bindSession(id: string, worker: string): void {
    this.sessions.delete(id);
    this.sessions.set(id, worker);
    if (this.sessions.size > SESSION_BINDINGS_MAX) this.sessions.delete(this.sessions.keys().next().value!);
  }
}
