// The scheduler's exact fast-forward (SchedulerConfig.fastForward), the part that looks ahead: from a
// step boundary, how many of the next steps are *quiet* and when each one ends. A quiet step is one
// in which every running request decodes one token that is neither its last nor its first, nothing
// is admitted, and every block it allocates is free now (so no allocation fails and nothing is
// preempted: no block is freed during quiet steps, so taking them in order cannot run short). Such a
// step changes only token counts, blocks and the prefix cache, and its cost is known in advance:
// T = B tokens, no prefill pairs, decode context growing by B per step (src/engine/sim/cost.ts).
// The scheduler then runs those steps without a timer each (scheduler-quiet.ts `QuietWindows.catchUp`), with the same
// schedule()/endStep() code, and one timer at the window's end. The step end times are computed as
// the VirtualClock computes a step's timer (`now + (due − now)`, then the next step starts at
// max(due, now − maxLagMs)), so every time is bit-identical to stepping one timer at a time
// (test/engine/sim/fast-forward.test.ts compares the two on seeded workloads).

import { type CostParams, stepCostMs } from "./cost.ts";

/** The longest window planned at once (the arrays it holds). */
const MAX_WINDOW_STEPS = 4096;

/** What the plan reads of a running request (the scheduler's own record). */
export interface QuietRequest {
  numComputed: number;
  outputs: number;
  promptLen: number;
  out: { length: number };
  sub: { maxTokens: number; ignoreEos: boolean };
}

export interface WindowPlan {
  /** Steps in the window (may be cut later by a change from outside, never lengthened). */
  steps: number;
  /** Planned start of the step after step j (its `due`), as the stepwise loop computes it. */
  dues: number[];
  /** Clock time at which step j ends (its timer's time). */
  ends: number[];
}

/**
 * Plan the quiet steps starting at `startMs` (the step's planned start) with the clock at `nowMs`,
 * or null when fewer than two are quiet (then one ordinary step is cheaper).
 * `running` in the scheduler's order; `freeBlocks` the pool's free count now.
 */
export function planWindow(
  running: readonly QuietRequest[],
  cfg: { blockSize: number; maxNumBatchedTokens: number; cost: CostParams; timeScale: number },
  freeBlocks: number,
  startMs: number,
  nowMs: number,
  maxLagMs: number,
): WindowPlan | null {
  const b = running.length;
  if (b === 0 || b > cfg.maxNumBatchedTokens) return null;
  const bs = cfg.blockSize;
  let k = MAX_WINDOW_STEPS;
  let ctx = 0;
  const phase = new Array<number>(bs).fill(0);
  for (const r of running) {
    // Decoding: one token to compute (the last sampled one); a request without ignoreEos may stop at
    // any token (its EOS or a stop string), so it ends windows before they start.
    if (r.outputs === 0 || r.numComputed !== r.promptLen + r.out.length - 1 || !r.sub.ignoreEos) return null;
    // Step j samples output index outputs + j; the one that reaches maxTokens finishes the request.
    k = Math.min(k, r.sub.maxTokens - r.outputs - 1);
    ctx += r.numComputed + 1;
    phase[r.numComputed % bs]!++;
  }
  if (k < 2) return null;
  const dues: number[] = [];
  const ends: number[] = [];
  let allocated = 0;
  let start = startMs;
  let now = nowMs;
  for (let j = 0; j < k; j++) {
    // Step j computes position numComputed + j of each request: a new block when that is a multiple of bs.
    allocated += phase[(bs - (j % bs)) % bs]!;
    if (allocated > freeBlocks) break;
    const ms = stepCostMs(cfg.cost, { tokens: b, prefillPairs: 0, decodeContextTokens: ctx }) / cfg.timeScale;
    const due = start + ms;
    const delay = due - now;
    if (!(ms > 0) || !(delay > 0)) break; // a zero-cost step continues at once (not a timer): step normally
    now = now + delay;
    dues.push(due);
    ends.push(now);
    start = Math.max(due, now - maxLagMs);
    ctx += b;
  }
  return ends.length < 2 ? null : { steps: ends.length, dues, ends };
}
