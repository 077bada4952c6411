// In-flight accounting. The frontend books a lease when it dispatches a request to a worker and
// releases it in a `finally` — on success, upstream error, timeout or client abort alike — so the
// count always returns to zero. release() is idempotent: calling it from both an abort handler and a
// finally block counts once. The count itself lives in the registry (load.in_flight), the single
// source every reader (policies, /admin/cluster, metrics) sees.
// Prefill bookkeeping (requests and prompt tokens not yet past their first token) is kept here for
// the KV-aware issue's load terms (Dynamo's active prefill tokens).
import type { WorkerRegistry } from "../cluster/registry.ts";

export interface Lease {
  readonly workerId: string;
  readonly promptTokens: number;
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

export class LoadBook {
  private readonly prefill = new Map<string, PrefillLoad>();

  constructor(
    private readonly registry: WorkerRegistry,
    private readonly onInFlight: (workerId: string, n: number) => void = () => {},
  ) {}

  book(workerId: string, promptTokens = 0): Lease {
    const tokens = Math.max(0, Math.floor(promptTokens));
    this.onInFlight(workerId, this.registry.addInFlight(workerId, +1));
    this.addPrefill(workerId, 1, tokens);
    let prefilling = true;
    let released = false;
    const endPrefill = () => {
      if (!prefilling) return;
      prefilling = false;
      this.addPrefill(workerId, -1, -tokens);
    };
    return {
      workerId,
      promptTokens: tokens,
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

  private addPrefill(workerId: string, requests: number, tokens: number): void {
    const p = this.prefill.get(workerId) ?? { requests: 0, tokens: 0 };
    p.requests += requests;
    p.tokens += tokens;
    if (p.requests <= 0) this.prefill.delete(workerId);
    else this.prefill.set(workerId, p);
  }
}
