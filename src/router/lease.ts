// In-flight accounting. The frontend books a lease when it dispatches a request to a worker and
// releases it in a `finally` — on success, upstream error, timeout or client abort alike — so the
// count always returns to zero. release() is idempotent: calling it from both an abort handler and a
// finally block counts once. The count itself lives in the registry (load.in_flight), the single
// source every reader (policies, /admin/cluster, metrics) sees.
// Prefill bookkeeping (requests and prompt tokens not yet past their first token) is kept here for
// the KV-aware load terms (Dynamo's active prefill tokens), and so are the prompt's KV blocks
// (active.ts: Dynamo's active decode blocks), added at book and freed at release.
import type { WorkerRegistry } from "../cluster/registry.ts";
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

export class LoadBook {
  private readonly prefill = new Map<string, PrefillLoad>();
  private readonly active = new ActiveBlocks();

  constructor(
    private readonly registry: WorkerRegistry,
    private readonly onInFlight: (workerId: string, n: number) => void = () => {},
  ) {}

  book(workerId: string, promptTokens = 0, prompt?: BookedPrompt): Lease {
    const tokens = Math.max(0, Math.floor(promptTokens));
    const prefillTokens = Math.max(0, tokens - Math.floor(prompt?.cachedTokens ?? 0));
    const blockSize = prompt?.blockSize ?? DEFAULT_BLOCK_SIZE;
    const blocks = Math.max(Math.ceil(tokens / blockSize), prompt?.blockHashes.length ?? 0);
    const { tracked: sampled, covered } = prompt ? this.active.track(prompt.blockHashes) : { tracked: [], covered: 0 };
    // Blocks not stood for by a tracked hash (the tail, the partial last block; all without hashes).
    const estimated = blocks - covered;
    this.onInFlight(workerId, this.registry.addInFlight(workerId, +1));
    this.addPrefill(workerId, 1, prefillTokens);
    this.active.add(workerId, sampled, estimated);
    let prefilling = true;
    let released = false;
    const endPrefill = () => {
      if (!prefilling) return;
      prefilling = false;
      this.addPrefill(workerId, -1, -prefillTokens);
    };
    return {
      workerId,
      promptTokens: tokens,
      promptBlocks: blocks,
      get prefilling() {
        return prefilling;
      },
      get released() {
        return released;
      },
      firstToken: endPrefill,
      release: () => {
        if (released) return;
        released = true;
        endPrefill();
        this.active.remove(workerId, sampled, estimated);
        this.onInFlight(workerId, this.registry.addInFlight(workerId, -1));
      },
    };
  }

  inFlight(workerId: string): number {
    return this.registry.inFlightOf(workerId);
  }

  prefillOf(workerId: string): PrefillLoad {
    const p = this.prefill.get(workerId);
    return p ? { ...p } : { requests: 0, tokens: 0 };
  }

  /** Distinct KV blocks of the requests in flight on a worker (a shared prefix counts once). */
  activeBlocks(workerId: string): number {
    return this.active.blocks(workerId);
  }

  /** Leading blocks of a prompt already active on each worker (absent = none). */
  activeOverlaps(hashes: readonly bigint[]): Map<string, number> {
    return this.active.overlaps(hashes);
  }

  private addPrefill(workerId: string, requests: number, tokens: number): void {
    const p = this.prefill.get(workerId) ?? { requests: 0, tokens: 0 };
    p.requests += requests;
    p.tokens += tokens;
    if (p.requests <= 0) this.prefill.delete(workerId);
    else this.prefill.set(workerId, p);
  }
}
