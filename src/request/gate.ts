// A gate every admitted request passes after its body is checked and before it is routed. The
// planner's wake-on-request is one: a request for a pool with no ready engine waits in a bounded
// hold queue (and wakes the planner at once) instead of getting a 503. Small on purpose: the
// frontend calls it, the daemon decides who implements it.
import type { HerdError } from "../core/errors.ts";

export interface RequestGate {
  /** Once per admitted request: the demand signal (arrivals, prompt tokens, requested tokens). */
  arrived(model: string, promptTokens: number, maxTokens: number | null): void;
  /**
   * Resolves when the request may be routed. Rejects with a HerdError (e.g. 503 with Retry-After
   * when the hold queue is full or the wait ran out), or with ClientGone when the client left.
   */
  pass(model: string, req: { bytes: number; promptTokens: number; signal: AbortSignal }): Promise<void>;
}

/** The client hung up while its request waited at the gate: its own outcome, never a 5xx. */
export class ClientGone extends Error {
  constructor() {
    super("client closed the connection while the request was held");
  }
}

export type GateRefusal = HerdError | ClientGone;
