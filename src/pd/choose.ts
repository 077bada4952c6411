// Choosing the two workers of a P/D pair (pure; the orchestrator passes what the router and the
// worker registry know). The prefill worker by the KV-aware cost (router/cost.ts, Dynamo's form:
// prefill_load_scale × blocks left to prefill after its cached overlap, + its active decode blocks),
// so a prefill worker that already holds the prompt's prefix wins; the decode worker by decode load
// (active blocks plus this request's) among those with room for the request's KV, ties broken by
// more free KV, then at random (seeded). A pair may span nodes.
import type { EngineKind, Role } from "../config/types.ts";
import type { Rng } from "../core/rng.ts";
import type { Overlap } from "../kv/indexer.ts";
import { type CostKnobs, kvCost } from "../router/cost.ts";
import { argminRandomTie } from "../router/load.ts";

export interface PdCandidate {
  id: string;
  node: string;
  url: string;
  kind: EngineKind;
  role: Role;
  /** Leading prompt blocks the worker holds, per medium. */
  overlap: Overlap;
  /** Prompt tokens of requests on the worker without a first token yet (herd's accounting). */
  activePrefillTokens: number;
  /** KV blocks of requests active on the worker. */
  activeBlocks: number;
  /** Requests booked on the worker without a first token yet: its prefill queue. */
  waiting: number;
  /** Scraped KV usage 0..1 and capacity in blocks; null when unknown. */
  kvUsage: number | null;
  numBlocks: number | null;
  /** An SGLang prefill worker's bootstrap port (--disaggregation-bootstrap-port); null otherwise. */
  bootstrapPort: number | null;
}

export interface PdRequestShape {
  promptTokens: number;
  blockSize: number;
}

export interface Choice {
  pick: PdCandidate | null;
  /** Every candidate with the terms that ranked it, for explain. */
  explain: { worker: string; node: string; terms: Record<string, number | string | null> }[];
}

const ZERO: Overlap = { gpu: 0, cpu: 0, disk: 0 };

export function choosePrefill(cands: readonly PdCandidate[], req: PdRequestShape, knobs: CostKnobs, exclude: ReadonlySet<string>, rng: Rng): Choice {
  const pool = cands.filter((c) => c.role === "prefill" && !exclude.has(c.id));
  const blocks = Math.ceil(req.promptTokens / req.blockSize);
  const terms = pool.map((c) => {
    const t = kvCost({ requestTokens: req.promptTokens, blockSize: req.blockSize, overlap: c.overlap, activePrefillTokens: c.activePrefillTokens, activeBlocks: c.activeBlocks, newBlocks: Math.max(0, blocks - c.overlap.gpu) }, knobs);
    return { ...t, overlap_blocks: c.overlap.gpu, waiting: c.waiting };
  });
  const explain = pool.map((c, i) => ({ worker: c.id, node: c.node, terms: terms[i]! }));
  if (pool.length === 0) return { pick: null, explain };
  return { pick: pool[argminRandomTie(terms.map((t) => [t.cost]), rng)]!, explain };
}

/** Decode candidates: decode workers, else aggregated ones (they can decode what they prefill). */
export function chooseDecode(cands: readonly PdCandidate[], req: PdRequestShape, exclude: ReadonlySet<string>, rng: Rng, roles: readonly Role[] = ["decode"]): Choice {
  const pool = cands.filter((c) => roles.includes(c.role) && !exclude.has(c.id));
  const blocks = Math.ceil(req.promptTokens / req.blockSize);
  const free = (c: PdCandidate) => (c.kvUsage === null || c.numBlocks === null ? null : Math.floor((1 - c.kvUsage) * c.numBlocks));
  const terms = pool.map((c) => {
    const f = free(c);
    return { decode_blocks: c.activeBlocks + blocks, free_blocks: f, fits: f === null || f >= blocks ? 1 : 0, kv_usage: c.kvUsage };
  });
  const explain = pool.map((c, i) => ({ worker: c.id, node: c.node, terms: terms[i]! }));
  if (pool.length === 0) return { pick: null, explain };
  // A worker without room for the request's KV would preempt or queue it: last resort only.
  const keys = terms.map((t) => [1 - t.fits, t.decode_blocks, t.kv_usage ?? 0]);
  return { pick: pool[argminRandomTie(keys, rng)]!, explain };
}

/** Uncached prompt tokens on a worker (what a local prefill there would compute). */
export function uncachedTokens(c: PdCandidate | null, req: PdRequestShape): number {
  const cached = Math.min(req.promptTokens, (c?.overlap.gpu ?? ZERO.gpu) * req.blockSize);
  return req.promptTokens - cached;
}
