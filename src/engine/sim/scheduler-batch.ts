// The sim scheduler's batch decision for one step (vLLM V1's schedule(), vllm/v1/core/sched/
// scheduler.py): running requests first (one token per decoding sequence, the rest of a prefill
// chunk), preempting when a running request needs a block and none is free, then admission from the
// waiting queue while the token budget, max_num_seqs and free blocks allow. Also the waiting queue's
// order and the step's price under the timing model (cost.ts).

import type { Clock } from "../../core/clock.ts";
import { chunkPairs, stepCostMs } from "./cost.ts";
import { before, type Req, type SchedulerCore, seqLen } from "./scheduler-request.ts";

/** FCFS: at the back. Priority: in (priority, arrival) order (a heap in vLLM; a sorted array here). */
export function addWaiting(core: SchedulerCore, r: Req): void {
  const waiting = core.waiting;
  if (core.cfg.policy !== "priority") return void waiting.push(r);
  let lo = 0;
  let hi = waiting.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (before(waiting[mid]!, r)) lo = mid + 1;
    else hi = mid;
  }
  waiting.splice(lo, 0, r);
}

/** Decide this step's batch; each request's `sched` says how many new tokens it computes. */
export function schedule(core: SchedulerCore, clock: Clock): Req[] {
  const { cfg, pool, kv, running, waiting, counters } = core;
  const bs = cfg.blockSize;
  const out: Req[] = [];
  let budget = cfg.maxNumBatchedTokens;
  let preempted = false;
  for (let i = 0; i < running.length && budget > 0; i++) {
    const r = running[i]!;
    const n = Math.min(seqLen(r) - r.numComputed, budget);
    if (n <= 0) continue;
    const need = Math.ceil((r.numComputed + n) / bs) - r.blocks.length;
    let ok = true;
    while (need > pool.numFree) {
      const victim = pickVictim(core);
      // Under the priority policy the victim may sit before r (already scheduled this step): its
      // tokens go back to the budget and the loop index follows the shortened list (as vLLM does).
      if (running.indexOf(victim) < i) i--;
      preempt(core, victim);
      const at = out.indexOf(victim);
      if (at >= 0) {
        out.splice(at, 1);
        budget += victim.sched;
      }
      preempted = true;
      if (victim === r) {
        ok = false;
        break;
      }
    }
    if (!ok) break;
    if (need > 0) r.blocks.push(...pool.allocate(need)!);
    r.sched = n;
    out.push(r);
    budget -= n;
  }
  // vLLM admits no new request in a step that had to preempt.
  while (!preempted && budget > 0 && waiting.length > 0 && running.length < cfg.maxNumSeqs) {
    const r = waiting[0]!;
    const hit = kv.prefixHit(r);
    // Blocks loaded from the tier continue the GPU hit when it still reaches where the load began.
    const loaded = hit.length >= r.tierFrom && r.tierTo > hit.length ? r.tierTo - hit.length : 0;
    const cached = (hit.length + loaded) * bs;
    const n = Math.min(seqLen(r) - cached, budget);
    const need = Math.ceil((cached + n) / bs) - hit.length;
    let hitFree = 0;
    for (const b of hit) if (b.refCount === 0) hitFree++;
    if (need > pool.numFree - hitFree) break; // head-of-line blocking, FCFS
    waiting.shift();
    pool.touch(hit);
    r.blocks = hit; // a fresh array from matchPrefix
    for (const b of pool.allocate(need)!) hit.push(b);
    r.numComputed = cached;
    r.numStored = cached / bs - loaded;
    r.tierTo = 0; // a preempted request recomputes (its loaded copy is not kept)
    if (loaded > 0) kv.storeFullBlocks(r); // the loaded blocks enter the prefix cache (BlockStored GPU)
    if (!r.counted) {
      r.counted = true;
      r.cachedTokens = cached;
      counters.prefixQueries += r.promptLen;
      counters.prefixHits += cached;
      counters.promptTokens += r.promptLen;
    }
    r.scheduledMs ??= clock.now();
    r.state = "running";
    running.push(r);
    r.sched = n;
    out.push(r);
    budget -= n;
  }
  return out;
}

/** Who is preempted when a running request needs a block: the last admitted (FCFS), or the largest (priority, arrival). */
function pickVictim(core: SchedulerCore): Req {
  const running = core.running;
  if (core.cfg.policy !== "priority") return running.at(-1)!;
  let v = running[0]!;
  for (const r of running) if (before(v, r)) v = r;
  return v;
}

/** Back to waiting with its blocks freed (recompute, as vLLM preempts). */
function preempt(core: SchedulerCore, r: Req): void {
  core.running.splice(core.running.indexOf(r), 1);
  core.pool.releaseTailFirst(r.blocks);
  r.blocks = [];
  r.numComputed = 0;
  r.numStored = 0;
  r.state = "waiting";
  // vLLM prepends a preempted request (FCFS); the priority queue re-inserts it in order.
  if (core.cfg.policy === "priority") addWaiting(core, r);
  else core.waiting.unshift(r);
  core.counters.preemptions++;
}

/** How long a step computing this batch takes (cost.ts), before the time scale. */
export function batchCostMs(core: SchedulerCore, scheduled: readonly Req[]): number {
  let tokens = 0;
  let pairs = 0;
  let ctx = 0;
  for (const r of scheduled) {
    const n = r.sched;
    tokens += n;
    if (r.outputs > 0 && n === 1 && r.numComputed === seqLen(r) - 1) ctx += r.numComputed + 1;
    else pairs += chunkPairs(r.numComputed, n);
  }
  return stepCostMs(core.cfg.cost, { tokens, prefillPairs: pairs, decodeContextTokens: ctx });
}
