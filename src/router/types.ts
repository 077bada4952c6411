// The routing seam. A policy is a small pure module: given the request's routing facts and the
// eligible workers' views, it picks one and says why, term by term. Filtering (state, model, role,
// excluded-after-failure) happens before a policy sees the candidates, so every policy gets only
// workers it may choose. Every built-in policy is a preset of the one pipeline (filters → weighted
// scorers → picker, ./pipeline/types.ts), run by PipelinePolicy (./pipeline/runner.ts).
import type { Rng } from "../core/rng.ts";
import type { Worker } from "../workers/worker.ts";
import type { Role, RouterConfig } from "../config/types.ts";
import type { KvIndex } from "../kv/indexer.ts";
import type { PrefillLoad } from "./lease.ts";
import type { Filter, Needs } from "./pipeline/types.ts";

export type { Filter, Needs };

/** What the router knows about a request when it routes it. */
export interface RouteRequest {
  model: string;
  /** Session id from the configured header, if any. */
  sessionId: string | null;
  /** Approximate prompt length in tokens (exact once tokenization lands), for load terms. */
  promptTokens: number;
  /** Workers that already failed this request (retry goes elsewhere). Empty on the first attempt. */
  exclude: ReadonlySet<string>;
  /** Only this worker may serve it (an on-demand LoRA adapter loaded there, src/frontend/lora.ts). */
  worker?: string;
  /**
   * Sequence hashes of the prompt's full KV blocks (src/preprocess → src/kv blockHashes), for the
   * KV-aware policies. Absent: they see no overlap and fall back to load terms from promptTokens.
   */
  blockHashes?: readonly bigint[];
  /**
   * Optional: the same hashes as u32 halves (`[2i]` low, `[2i + 1]` high; at least 2 ×
   * blockHashes.length entries), e.g. from src/kv hash.ts chainHashesU32. When given, the kv match
   * reads them instead of splitting blockHashes (one copy of 16 KiB saved at 32k tokens).
   */
  blockHashPairs?: Uint32Array;
  /** Block size (tokens) the hashes were cut with: the model's block_size. Default 16. */
  blockSize?: number;
  /**
   * The role(s) a worker must have for this request. Absent: the leg preset's role (`prefill`,
   * `decode`), else `aggregated`, the role of a whole request.
   */
  role?: Role | readonly Role[];
  /**
   * A P/D leg (src/pd): routed by that leg's preset (`pd-prefill`: router.pd.prefill, `pd-decode`:
   * router.pd.decode) instead of router.policy, over the same leases, index and explain.
   */
  leg?: "prefill" | "decode";
  /** Time-to-first-token objective (ms) from the x-slo-ttft-ms header; absent = the model's default (router.predicted). */
  sloTtftMs?: number;
  /** Inter-token latency objective (ms) from the x-slo-itl-ms header; absent = the model's default. */
  sloItlMs?: number;
}

export interface RouteCtx {
  rng: Rng;
  nowMs: number;
  /**
   * True for /admin/route/explain: the policy must answer exactly as it would route but leave its
   * own state untouched (round-robin does not advance, nothing is remembered).
   */
  dryRun: boolean;
}

/** One candidate's figures as the policy saw them, for /admin/route/explain. */
export interface CandidateExplain {
  worker: string;
  node: string;
  /** Named figures the policy used (in_flight, running, waiting, ring_distance, cost, …). */
  terms: Record<string, number | string | null>;
}

/** What a policy returns: the pick and every candidate's terms. */
export interface Pick {
  /** Chosen worker id; always one of the candidates. */
  chosen: string;
  /** Every candidate the policy was given, in the order given. */
  candidates: CandidateExplain[];
  /** One sentence: why this worker. */
  reason: string;
  /** Time spent in the policy's stages, ms (KV-aware policies: `match_ms`, `score_ms`). */
  timings?: Record<string, number>;
  /**
   * Prompt tokens the policy expects the chosen worker to have cached (GPU overlap × block size);
   * compare with the engine's usage.prompt_tokens_details.cached_tokens to see how stale the index is.
   */
  predictedCachedTokens?: number;
  /** Request-level figures the policy used (KV-aware policies: tokens, block_size, hashed_blocks, request_blocks). */
  request?: Record<string, number>;
  /**
   * The `predicted` policy's latency forecast for the chosen worker: `rawTtftMs` before the
   * worker's online correction, which the Router feeds back with the measured TTFT (Policy.learn).
   */
  latency?: { ttftMs: number; itlMs: number; rawTtftMs: number };
}

/** A measured latency against what the policy predicted for it (Router → Policy.learn). */
export interface LatencySample {
  workerId: string;
  /** The uncorrected model prediction made at routing time (Pick.latency.rawTtftMs). */
  predictedTtftMs: number;
  /** Booking → first token, on the router's clock. */
  measuredTtftMs: number;
}

/** A worker removed before the policy ran, and the filter that removed it. */
export interface FilteredOut {
  worker: string;
  node: string;
  filter: string;
  /** Why, when the filter has more to say (an ejection's cause and remaining time). */
  detail?: string;
}

export interface Decision extends Pick {
  policy: string;
  /** Workers of the model that filters removed (not ready, wrong role, excluded after failure). */
  filtered: FilteredOut[];
}

export interface Policy {
  readonly name: string;
  /** The request inputs the policy's stages read (union); absent = treat as all. */
  readonly needs?: Required<Needs>;
  /** `candidates` is non-empty and already filtered. Must not mutate shared state except its own. */
  pick(req: RouteRequest, candidates: readonly Readonly<Worker>[], ctx: RouteCtx): Pick;
  /** The worker left, or its engine restarted (its cache is empty): drop what the policy remembers of it. */
  forgetWorker?(workerId: string): void;
  /** The router is being replaced (reload): drop subscriptions (e.g. to the KV index). */
  close?(): void;
  /** A request it routed had its first token: refine what it predicts for that worker. */
  learn?(sample: LatencySample): void;
}

/** Live load the Router's leases keep, for load terms finer than in_flight (KV-aware policies). */
export interface LoadView {
  /** Requests (and their prompt tokens) booked on a worker that have not had their first token. */
  prefilling(workerId: string): PrefillLoad;
  /**
   * Same requests, tokens minus those the worker has computed since dispatch (lease.ts), except the
   * newest `waiting` (the engine's scraped queue), which count in full; absent = prefilling().
   */
  prefillRemaining?(workerId: string, waiting?: number): PrefillLoad;
  /** Distinct KV blocks of the requests in flight on a worker. */
  activeBlocks(workerId: string): number;
  /** KV blocks of the requests in flight on a worker, each request counted in full; absent = activeBlocks(). */
  heldBlocks?(workerId: string): number;
  /** Leading blocks of a prompt already active on each worker (absent = none). */
  activeOverlaps(hashes: readonly bigint[]): Map<string, number>;
}

/** What a policy may read besides the candidates; the Router passes its own. All optional. */
export interface PolicyDeps {
  /** The event-fed block index (`kv`); without one `kv` sees no engine-reported overlap. */
  kvIndex?: KvIndex;
  load?: LoadView;
}

/** A policy's entry in the registry list (src/router/policies/index.ts): one file + one line. */
export interface PolicyFactory {
  readonly name: string;
  create(config: RouterConfig, deps?: PolicyDeps): Policy;
}
