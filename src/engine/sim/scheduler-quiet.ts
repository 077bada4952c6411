// The sim scheduler's fast-forward, the part that runs a planned window (fast-forward.ts plans it):
// quiet steps ended in one pass instead of a timer each, with exactly what schedule()/endStep()
// would have done step by step, and one timer at the window's end.

import type { Clock, TimerHandle } from "../../core/clock.ts";
import { planWindow, type WindowPlan } from "./fast-forward.ts";
import { schedule } from "./scheduler-batch.ts";
import { MAX_LAG_MS, type Req, type SchedulerCore } from "./scheduler-request.ts";

/** A clock that can set a timer at an exact time (VirtualClock). */
export interface ExactClock extends Clock {
  setTimerAt(atMs: number, fn: () => void): TimerHandle;
}

/** A fast-forward window in progress: step `cur` is in flight (started, not ended); `cur === plan.steps` when all ended. */
export interface Window {
  plan: WindowPlan;
  cur: number;
  /** The batch (the running requests when the window began, in order). */
  reqs: Req[];
  timer: TimerHandle;
}

/** The scheduler's windows: at most one at a time, while the scheduler counts as stepping. */
export class QuietWindows {
  private window: Window | null = null;
  /** True while quiet steps are being caught up (their callbacks must not change the scheduler). */
  private folding = false;

  /** `ended(dueMs)`: the window's last step ended; the next step is due at dueMs (as after any step). */
  constructor(
    private readonly core: SchedulerCore,
    private readonly clock: ExactClock,
    private readonly ended: (dueMs: number) => void,
  ) {}

  /** Start a window at `startMs` when the next steps are quiet (fast-forward.ts); false otherwise. */
  start(startMs: number): boolean {
    const { cfg, running, waiting } = this.core;
    // Nothing can be admitted: the queue is empty, or the batch is at max_num_seqs (it stays so).
    if (this.core.kv.offload !== null || (waiting.length > 0 && running.length < cfg.maxNumSeqs)) return false;
    const plan = planWindow(running, cfg, this.core.pool.numFree, startMs, this.clock.now(), MAX_LAG_MS);
    if (plan === null) return false;
    this.core.counters.steps++;
    const reqs = schedule(this.core, this.clock);
    this.window = { plan, cur: 0, reqs, timer: this.clock.setTimerAt(plan.ends[plan.steps - 1]!, () => this.end()) };
    return true;
  }

  /** Run the window's steps that have ended by `now`; the next one starts (its blocks are taken). */
  catchUp(now: number): void {
    const w = this.window;
    if (w === null || this.folding) return;
    let c = w.cur;
    while (c < w.plan.steps && w.plan.ends[c]! <= now) c++;
    if (c === w.cur) return;
    this.folding = true;
    try {
      runQuiet(this.core, w, c);
    } finally {
      this.folding = false;
    }
  }

  /**
   * A change from outside during a window (an arrival, an abort, blocks taken or freed): the state
   * is brought to now, the step in flight ends as planned, and stepping goes on from there as usual.
   */
  interrupt(): void {
    const w = this.window;
    if (w === null) return;
    if (this.folding) throw new Error("SimScheduler fast-forward: a callback of a quiet step changed the scheduler");
    this.catchUp(this.clock.now());
    if (w.cur >= w.plan.steps - 1) return;
    w.plan.steps = w.cur + 1;
    w.timer.cancel();
    w.timer = this.clock.setTimerAt(w.plan.ends[w.cur]!, () => this.end());
  }

  private end(): void {
    const w = this.window!;
    this.catchUp(this.clock.now());
    this.window = null;
    this.ended(w.plan.dues[w.cur - 1]!);
  }
}

/**
 * End quiet steps w.cur … c−1 (and start the ones after them) in one pass, with what
 * schedule()/endStep() would do step by step: the same blocks in the same order, the same hashes,
 * KV event batches and counters. A request computes position p of its sequence in a step; it
 * stores a full block at that step's end and takes a new block at the next step's start exactly
 * when p + 1 is a multiple of the block size, so each step touches only the requests in that
 * phase (O(steps + blocks), not O(steps × batch)). Tokens go out per request, each with its own
 * step's time (their order across requests is the only difference from stepping).
 */
function runQuiet(core: SchedulerCore, w: Window, c: number): void {
  const bs = core.cfg.blockSize;
  const from = w.cur;
  const k = c - from;
  const reqs = w.reqs.filter((r) => r.state === "running"); // aborted meanwhile: skipped, as endStep does
  const base = reqs.map((r) => r.numComputed);
  for (const r of reqs) {
    for (let j = from; j < c; j++) {
      const t = r.sub.nextToken(r.outputs);
      r.out.push(t.id);
      r.outputs++;
      if (r.sub.handlers.onToken(t.id, r.outputs - 1, w.plan.ends[j]!) === true) throw new Error("SimScheduler fast-forward: an onToken stopped its request inside a quiet step");
    }
  }
  if (core.running.length !== reqs.length) throw new Error("SimScheduler fast-forward: the batch changed inside a quiet step");
  const byPhase: number[][] = Array.from({ length: bs }, () => []);
  for (let i = 0; i < reqs.length; i++) byPhase[base[i]! % bs]!.push(i);
  const events = core.cfg.kvEvents !== false;
  let dirty = true; // the step in flight took its blocks before this pass: its batch is flushed at its end
  for (let d = 1; d <= k; d++) {
    const bucket = byPhase[(bs - (d % bs)) % bs]!;
    for (const i of bucket) {
      const r = reqs[i]!;
      r.numComputed = base[i]! + d;
      core.kv.storeFullBlocks(r);
    }
    if (events && (dirty || bucket.length > 0)) core.kv.flushEvents();
    dirty = false;
    if (from + d < w.plan.steps) {
      core.counters.steps++;
      for (const i of bucket) reqs[i]!.blocks.push(...core.pool.allocate(1)!);
      dirty = bucket.length > 0;
    }
  }
  for (let i = 0; i < reqs.length; i++) reqs[i]!.numComputed = base[i]! + k;
  core.counters.generationTokens += reqs.length * k;
  w.cur = c;
}
