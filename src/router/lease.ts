// In-flight accounting. The frontend books a lease when it dispatches a request to a worker and
// releases it in a `finally` — on success, upstream error, timeout or client abort alike — so the
// count always returns to zero. release() is idempotent: calling it from both an abort handler and a
// finally block counts once. The count itself lives in the registry (load.in_flight), the single
// source every reader (policies, /admin/cluster, metrics) sees.
// Prefill bookkeeping (requests and prompt tokens not yet past their first token) is kept here for
// the KV-aware load terms (Dynamo's active prefill tokens), and so are the prompt's KV blocks
// (active.ts: Dynamo's active decode blocks, a shared prefix once), added at book and freed at
// release, and their sum per worker with every request counted in full (`heldBlocks`: the decode
// work, since each sequence's KV is read every step).
//
// Prefill progress (`prefillRemaining`, router.kv.prefill_load_model `progress`): a prompt dispatched
// a while ago is partly computed, so counting it in full until its first token makes a worker that
// is about to finish look as busy as one that just started (round-robin, which sends to the worker
// it served longest ago, beat the kv cost on prompts that share nothing because of this). Each
// worker's prefill rate (tokens/ms) is learned from first tokens of prompts that had the worker's
// prefill queue to themselves (EWMA; dispatch → first token, so queueing behind decode steps and
// the engine's request overhead make it an underestimate, i.e. remaining work is overestimated);
// the worker is taken to compute its queued prompts in dispatch order at that rate — except the
// ones its engine reports as waiting at the last scrape (the newest of them): a prompt queued for
// free KV blocks computes nothing, and counting it as done made a worker whose KV was full look
// free, so it kept receiving requests that queued for a second while an idle worker starved
// (bench/kv-tier-docqa.ts, issue 25).
import type { WorkerRegistry } from "../workers/registry.ts";
import { ActiveBlocks } from "./active.ts";

export interface Lease {
  readonly workerId: string;
  readonly promptTokens: number;
  /** KV blocks this request holds on the worker while in flight (full blocks + a partial last one). */
  readonly promptBlocks: number;
  /** True until firstToken() or release(). */
  readonly prefilling: boolean;
  readonly released: boolean;
  /** The first token arrived: the prompt is no longer waiting for prefill. Idempotent. */
  firstToken(): void;
  /** The request finished in any way. Idempotent. */
  release(): void;
}

export interface PrefillLoad {
  requests: number;
  tokens: number;
}

/** The prompt's KV blocks, when the request was preprocessed (src/preprocess). */
export interface BookedPrompt {
  /** Sequence hashes of the prompt's full blocks. */
  blockHashes: readonly bigint[];
  blockSize: number;
  /**
   * Prompt tokens the chosen worker is expected to hold already (the policy's predicted overlap):
   * only the rest counts as prefill load, as Dynamo's "new prefill tokens = input − overlap ×
   * block size". Default 0. Counting a cached document's tokens as prefill work made a worker busy
   * with questions on its document look costlier than a cold idle one, scattering the document.
   */
  cachedTokens?: number;
}

/** Block size assumed for requests booked without one (the config's default block_size). */
export const DEFAULT_BLOCK_SIZE = 16;

/** Weight of a new sample in a worker's learned prefill rate. */
const RATE_EWMA = 0.1;

interface Prefilling {
  /** When it was booked (ms, the book's clock; 0 without one). */
  readonly atMs: number;
  /** Its prefill tokens (prompt − predicted cached). */
  readonly tokens: number;
}

const NO_TRACK: { tracked: readonly number[]; covered: number } = { tracked: [], covered: 0 };

/**
 * One booking. A class, not an object literal over closures: book() runs per request and the
 * literal made three closures, their scope, two getters and the queue entry (bench/frontend-allocs.ts).
 * It is its own entry in the worker's prefill queue.
 */
class BookedLease implements Lease, Prefilling {
  private prefilling_ = true;
  private released_ = false;
  constructor(
    private readonly book: LoadBook,
    readonly workerId: string,
    readonly promptTokens: number,
    readonly promptBlocks: number,
    /** Prefill tokens (Prefilling.tokens). */
    readonly tokens: number,
    readonly sampled: readonly number[],
    readonly estimated: number,
    readonly queue: Set<Prefilling>,
    /** Booked with no other prompt of its worker before its first token (a clean rate sample). */
    readonly alone: boolean,
    readonly atMs: number,
  ) {}
  get prefilling(): boolean {
    return this.prefilling_;
  }
  get released(): boolean {
    return this.released_;
  }
  firstToken(): void {
    if (!this.prefilling_) return;
    this.prefilling_ = false;
    this.book.endPrefill(this, true);
  }
  release(): void {
    if (this.released_) return;
    this.released_ = true;
    if (this.prefilling_) {
      this.prefilling_ = false;
      this.book.endPrefill(this, false);
    }
    this.book.unbook(this);
  }
}

export class LoadBook {
  private readonly prefill = new Map<string, PrefillLoad>();
  private readonly active = new ActiveBlocks();
  /** Σ promptBlocks of the leases in flight, per worker (each request in full). */
  private readonly held = new Map<string, number>();
  /** Prompts before their first token, per worker, in dispatch order (Set keeps insertion order). */
  private readonly queued = new Map<string, Set<Prefilling>>();
  /** Learned prefill tokens per ms, per worker. */
  private readonly rate = new Map<string, number>();

  /** `now` (ms, monotonic) enables prefill progress; without it prefillRemaining = prefillOf. */
  constructor(
    private readonly registry: WorkerRegistry,
    private readonly onInFlight: (workerId: string, n: number) => void = () => {},
    private readonly now: (() => number) | null = null,
  ) {}

  book(workerId: string, promptTokens = 0, prompt?: BookedPrompt): Lease {
    const tokens = Math.max(0, Math.floor(promptTokens));
    const prefillTokens = Math.max(0, tokens - Math.floor(prompt?.cachedTokens ?? 0));
    const blockSize = prompt?.blockSize ?? DEFAULT_BLOCK_SIZE;
    const blocks = Math.max(Math.ceil(tokens / blockSize), prompt?.blockHashes.length ?? 0);
    const { tracked: sampled, covered } = prompt ? this.active.track(prompt.blockHashes) : NO_TRACK;
    // Blocks not stood for by a tracked hash (the tail, the partial last block; all without hashes).
    const estimated = blocks - covered;
    this.onInFlight(workerId, this.registry.addInFlight(workerId, +1));
    this.addPrefill(workerId, 1, prefillTokens);
    this.active.add(workerId, sampled, estimated);
    this.addHeld(workerId, blocks);
    let queue = this.queued.get(workerId);
    if (!queue) this.queued.set(workerId, (queue = new Set()));
    const lease = new BookedLease(this, workerId, tokens, blocks, prefillTokens, sampled, estimated, queue, queue.size === 0, this.now?.() ?? 0);
    queue.add(lease);
    return lease;
  }

  /** @internal BookedLease → book: its prompt is past prefill (first token or release). */
  endPrefill(l: BookedLease, firstToken: boolean): void {
    const queue = l.queue;
    queue.delete(l);
    if (queue.size === 0 && this.queued.get(l.workerId) === queue) this.queued.delete(l.workerId);
    if (firstToken && l.alone && this.now && l.tokens > 0) this.learnRate(l.workerId, l.tokens / Math.max(1, this.now() - l.atMs));
    this.addPrefill(l.workerId, -1, -l.tokens);
  }

  /** @internal BookedLease → book: the request finished (after endPrefill). */
  unbook(l: BookedLease): void {
    this.active.remove(l.workerId, l.sampled, l.estimated);
    this.addHeld(l.workerId, -l.promptBlocks);
    this.onInFlight(l.workerId, this.registry.addInFlight(l.workerId, -1));
  }

  inFlight(workerId: string): number {
    return this.registry.inFlightOf(workerId);
  }

  prefillOf(workerId: string): PrefillLoad {
    const p = this.prefill.get(workerId);
    return p ? { ...p } : { requests: 0, tokens: 0 };
  }

  /**
   * prefillOf with each prompt's tokens reduced by what the worker has computed since dispatch, at
   * its learned rate, earliest prompt first (see the header); the newest `waiting` prompts (the
   * engine's scraped queue) count in full. Unlearned rate → prefillOf.
   */
  prefillRemaining(workerId: string, waiting = 0): PrefillLoad {
    const p = this.prefillOf(workerId);
    const rate = this.rate.get(workerId);
    const queue = this.queued.get(workerId);
    if (rate === undefined || !this.now || !queue || p.requests === 0) return p;
    const now = this.now();
    let budget = -1;
    let tokens = 0;
    let i = 0;
    const computing = queue.size - Math.max(0, Math.floor(waiting));
    for (const e of queue) {
      if (i++ >= computing) {
        tokens += e.tokens;
        continue;
      }
      if (budget < 0) budget = Math.max(0, now - e.atMs) * rate; // the earliest dispatch starts the clock
      tokens += Math.max(0, e.tokens - budget);
      budget = Math.max(0, budget - e.tokens);
    }
    return { requests: p.requests, tokens };
  }

  /** The learned prefill rate of a worker in tokens per ms (undefined until a first sample). */
  prefillRate(workerId: string): number | undefined {
    return this.rate.get(workerId);
  }

  /** Distinct KV blocks of the requests in flight on a worker (a shared prefix counts once). */
  activeBlocks(workerId: string): number {
    return this.active.blocks(workerId);
  }

  /** KV blocks of the requests in flight on a worker, each request in full (a shared prefix once per request). */
  heldBlocks(workerId: string): number {
    return this.held.get(workerId) ?? 0;
  }

  /** Leading blocks of a prompt already active on each worker (absent = none). */
  activeOverlaps(hashes: readonly bigint[]): Map<string, number> {
    return this.active.overlaps(hashes);
  }

  private learnRate(workerId: string, sample: number): void {
    const old = this.rate.get(workerId);
    this.rate.set(workerId, old === undefined ? sample : old + RATE_EWMA * (sample - old));
  }

  private addHeld(workerId: string, blocks: number): void {
    const n = (this.held.get(workerId) ?? 0) + blocks;
    if (n <= 0) this.held.delete(workerId);
    else this.held.set(workerId, n);
  }

  private addPrefill(workerId: string, requests: number, tokens: number): void {
    const p = this.prefill.get(workerId) ?? { requests: 0, tokens: 0 };
    p.requests += requests;
    p.tokens += tokens;
    if (p.requests <= 0) this.prefill.delete(workerId);
    else this.prefill.set(workerId, p);
  }
}
