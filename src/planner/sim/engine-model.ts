// A fast model of one engine for day-long planner simulations: vLLM-style continuous batching with
// chunked prefill, priced by the simulated engine's own step cost (src/engine/sim/cost.ts), but
// advanced from event to event instead of step by step. Between two events the batch is constant,
// so every step costs the same: k steps later, each decoding sequence has k more tokens and the
// oldest prefill has k chunks more. Events: a prefill completes (the first token), a sequence
// finishes, a request arrives (it joins at the next step boundary, as in vLLM). The token-by-token
// scheduler (src/engine/sim/scheduler.ts) stays the reference for routing studies; this one trades
// prefix caching and preemption for a day of traffic on 16 engines in seconds.
import { chunkPairs, stepCostMs, type CostParams } from "../../engine/sim/cost.ts";

export interface EngineModelParams {
  cost: CostParams;
  maxNumSeqs: number;
  maxBatchedTokens: number;
  /** KV capacity in tokens; a request is admitted when its prompt + output fit. */
  kvTokens: number;
}

export interface ModelRequest {
  isl: number;
  osl: number;
  arrivalMs: number;
  /** Prompt tokens whose KV is already here (a P/D decode with transferred blocks); default 0. */
  cachedTokens?: number;
  onFirstToken(nowMs: number): void;
  onFinish(nowMs: number): void;
}

interface Seq {
  r: ModelRequest;
  prefillLeft: number;
  decoded: number;
}

export class EngineModel {
  private readonly waiting: ModelRequest[] = [];
  private readonly prefilling: Seq[] = [];
  private readonly decoding: Seq[] = [];
  private kvUsed = 0;
  /** The time up to which the engine's state is computed (a step boundary). */
  private atMs: number;
  /** plan() of the current state; dropped whenever the batch changes. */
  private cached: { steps: number; stepMs: number; chunk: number } | null = null;

  constructor(
    private readonly p: EngineModelParams,
    nowMs: number,
  ) {
    this.atMs = nowMs;
  }

  get inFlight(): number {
    return this.waiting.length + this.prefilling.length + this.decoding.length;
  }

  /** Queue a request (call advanceTo(now) first). */
  submit(r: ModelRequest): void {
    this.waiting.push(r);
    if (this.prefilling.length + this.decoding.length === 0) this.atMs = Math.max(this.atMs, r.arrivalMs);
    this.admit();
  }

  /**
   * Bring the state up to `nowMs`: whole steps are applied; a step in progress at `nowMs` is
   * finished too (its results apply at its end, which becomes the state's time).
   */
  advanceTo(nowMs: number): void {
    while (this.prefilling.length + this.decoding.length > 0) {
      const plan = this.plan();
      const evAt = this.atMs + plan.steps * plan.stepMs;
      if (evAt > nowMs) {
        // Apply the steps that have started by nowMs (the last one completes after it).
        const started = Math.min(plan.steps, Math.ceil((nowMs - this.atMs) / plan.stepMs));
        if (started > 0) this.apply(started, plan);
        return;
      }
      this.apply(plan.steps, plan);
    }
    this.atMs = Math.max(this.atMs, nowMs);
  }

  /** When the next event happens if nothing arrives (null when idle). */
  nextEventMs(): number | null {
    if (this.prefilling.length + this.decoding.length === 0) return null;
    const plan = this.plan();
    return this.atMs + plan.steps * plan.stepMs;
  }

  private plan(): { steps: number; stepMs: number; chunk: number } {
    return (this.cached ??= this.computePlan());
  }

  private computePlan(): { steps: number; stepMs: number; chunk: number } {
    const b = this.decoding.length;
    const head = this.prefilling[0];
    const chunk = head ? Math.max(1, Math.min(head.prefillLeft, this.p.maxBatchedTokens - b)) : 0;
    let context = 0;
    for (const s of this.decoding) context += s.r.isl + s.decoded;
    const stepMs = Math.max(1e-3, stepCostMs(this.p.cost, { tokens: b + chunk, prefillPairs: head ? chunkPairs(head.r.isl - head.prefillLeft, chunk) : 0, decodeContextTokens: context }));
    let steps = Infinity;
    for (const s of this.decoding) steps = Math.min(steps, s.r.osl - s.decoded);
    if (head) steps = Math.min(steps, Math.ceil(head.prefillLeft / chunk));
    return { steps: Math.max(1, steps), stepMs, chunk };
  }

  private apply(steps: number, plan: { stepMs: number; chunk: number }): void {
    this.cached = null;
    this.atMs += steps * plan.stepMs;
    const now = this.atMs;
    for (const s of this.decoding) s.decoded += steps;
    const head = this.prefilling[0];
    if (head) {
      head.prefillLeft = Math.max(0, head.prefillLeft - steps * plan.chunk);
      if (head.prefillLeft === 0) {
        this.prefilling.shift();
        // The step that computes a prompt's last chunk samples its first token.
        head.decoded = 1;
        head.r.onFirstToken(now);
        this.decoding.push(head);
      }
    }
    for (let i = this.decoding.length - 1; i >= 0; i--) {
      const s = this.decoding[i]!;
      if (s.decoded >= s.r.osl) {
        this.decoding.splice(i, 1);
        this.kvUsed -= s.r.isl + s.r.osl;
        s.r.onFinish(now);
      }
    }
    this.admit();
  }

  private admit(): void {
    while (this.waiting.length > 0 && this.prefilling.length + this.decoding.length < this.p.maxNumSeqs) {
      const r = this.waiting[0]!;
      const need = r.isl + r.osl;
      // A request larger than the whole cache is still served alone (vLLM would refuse it at the API).
      if (this.kvUsed + need > this.p.kvTokens && this.kvUsed > 0) break;
      this.waiting.shift();
      this.cached = null;
      this.kvUsed += need;
      // At least one token is computed even with the whole prompt cached (it samples the first token).
      this.prefilling.push({ r, prefillLeft: Math.max(1, r.isl - (r.cachedTokens ?? 0)), decoded: 0 });
    }
  }
}
