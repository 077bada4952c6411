// Retry rules for failures before the first byte reached the client (docs/references.md#reliability-R3).
// - retryable(): which failures may be retried on another worker at all.
// - RetryBudget: Envoy-style budget so retries cannot multiply load during an outage: over a sliding
//   window, retries ≤ max(min_retries_per_window, budget_ratio × requests). Pure core on the Clock:
//   counts live in fixed time buckets (bounded memory whatever the request rate).
import type { Clock } from "../core/clock.ts";
import type { RetryConfig } from "../config/types.ts";

export type FailureKind =
  /** Connection refused, reset or DNS/socket error before any response. */
  | "connect"
  /** The engine answered with an HTTP error status before any body byte was relayed. */
  | "status"
  /** The upstream first-token timeout fired before anything was sent to the client. */
  | "timeout"
  /** The client went away: never retried. */
  | "client_abort";

export interface Failure {
  kind: FailureKind;
  /** HTTP status for kind "status". */
  status?: number;
  /** True once any byte of the response went to the client; then a retry would corrupt the stream. */
  firstByteSent: boolean;
  /**
   * The target is dead or unreachable (refused, no connection, no response head): the failure
   * ejects it (outlier.ts), so the retry is not counted against the budget — the budget guards
   * against retries multiplying load on overloaded engines, and this attempt loaded none; ejection
   * keeps the next requests off the target, so such retries stop by themselves. Still bounded by
   * `attempts`.
   */
  dead?: boolean;
}

/**
 * Whether a failure may be retried on another worker. 5xx and 429 mean "this worker cannot serve
 * it now" and another might; other 4xx are about the request itself and would fail everywhere.
 */
export function retryable(f: Failure): boolean {
  if (f.firstByteSent || f.kind === "client_abort") return false;
  if (f.kind === "status") return f.status !== undefined && (f.status >= 500 || f.status === 429);
  return true;
}

/** Buckets per window: the window slides in steps of window/BUCKETS. */
const BUCKETS = 10;

export class RetryBudget {
  private readonly bucketMs: number;
  private readonly requests = new Float64Array(BUCKETS);
  private readonly retries = new Float64Array(BUCKETS);
  private readonly epochs = new Float64Array(BUCKETS).fill(-1);

  constructor(
    private readonly config: RetryConfig,
    private readonly clock: Clock,
    readonly windowMs = 10_000,
  ) {
    this.bucketMs = Math.max(1, windowMs / BUCKETS);
  }

  /** Count one first attempt (the router does this for every routed request with no exclusions). */
  recordRequest(): void {
    this.requests[this.bucket()]! += 1;
  }

  /**
   * Ask to retry: `attempt` is the retry's number (1 = first retry). Allowed when attempt ≤
   * config.attempts and the window's retries are under budget (`exempt`: a dead target's retry, not
   * counted, see Failure.dead); an allowed retry is counted.
   */
  tryAcquire(attempt = 1, exempt = false): boolean {
    if (attempt < 1 || attempt > this.config.attempts) return false;
    if (exempt) return true;
    const b = this.bucket();
    if (this.retriesInWindow() >= this.limit()) return false;
    this.retries[b]! += 1;
    return true;
  }

  /** Current figures, for metrics and tests. */
  snapshot(): { requests: number; retries: number; limit: number } {
    this.bucket();
    return { requests: sum(this.requests), retries: this.retriesInWindow(), limit: this.limit() };
  }

  private limit(): number {
    return Math.max(this.config.min_retries_per_window, Math.floor(this.config.budget_ratio * sum(this.requests)));
  }

  private retriesInWindow(): number {
    return sum(this.retries);
  }

  /** Index of the current bucket, clearing buckets that fell out of the window. */
  private bucket(): number {
    const epoch = Math.floor(this.clock.now() / this.bucketMs);
    for (let i = 0; i < BUCKETS; i++) {
      if (this.epochs[i]! !== -1 && epoch - this.epochs[i]! >= BUCKETS) {
        this.requests[i] = 0;
        this.retries[i] = 0;
        this.epochs[i] = -1;
      }
    }
    const b = ((epoch % BUCKETS) + BUCKETS) % BUCKETS;
    if (this.epochs[b] !== epoch) {
      this.requests[b] = 0;
      this.retries[b] = 0;
      this.epochs[b] = epoch;
    }
    return b;
  }
}

function sum(a: Float64Array): number {
  let s = 0;
  for (const x of a) s += x;
  return s;
}
