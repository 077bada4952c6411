// The simulated engine core: vLLM-V1-style continuous batching on an injected Clock. Each step
// schedules running requests first (one token per decoding sequence, the rest of a prefill chunk),
// then admits waiting requests FCFS while the token budget, the sequence limit and free KV blocks
// allow (a prefix-cache hit skips the cached blocks). A step lasts stepCostMs(...) / timeScale; its
// results (computed tokens, sampled tokens, finished requests, KV events) apply when it ends. When a
// running request needs a block and none is free, the most recently admitted request is preempted
// (blocks freed, recomputed later), as vLLM does. With `policy: "priority"` (vLLM's
// `--scheduling-policy priority`, vllm/v1/core/sched/request_queue.py PriorityRequestQueue and
// scheduler.py) the waiting queue is ordered by (priority, arrival), lower value first, a preempted
// request re-enters it in that order, and the victim of a preemption is the running request with
// the largest (priority, arrival) instead of the last admitted. No sockets, no sleeping: `herd simulate` runs this
// on a VirtualClock. With `fastForward` (a VirtualClock only) runs of quiet steps go without a timer
// each, with identical results (fast-forward.ts): what makes a simulated day on many engines cheap.

// This file: the loop (arrivals, steps on the clock, finishing) and the public surface. The batch of
// a step: scheduler-batch.ts; hashes, prefix hits, stored blocks, KV events: scheduler-kv.ts;
// fast-forward windows: scheduler-quiet.ts.

import type { Clock, TimerHandle } from "../../core/clock.ts";
import { HerdError, badRequest } from "../../core/errors.ts";
import { type Block, BlockPool, type KvEvent } from "./blocks.ts";
import { addWaiting, batchCostMs, schedule } from "./scheduler-batch.ts";
import { SchedulerKv } from "./scheduler-kv.ts";
import { type ExactClock, QuietWindows } from "./scheduler-quiet.ts";
import { herdHashes, MAX_LAG_MS, newReq, type Req, type SchedulerCore, type SchedulerCounters, seqLen } from "./scheduler-request.ts";
import type { FinishInfo, FinishReason, SchedulerConfig, SchedulerOffload, SchedulerStats, SubmitRequest } from "./scheduler-types.ts";

export type { FinishInfo, FinishReason, RequestHandlers, SchedulerConfig, SchedulerOffload, SchedulerStats, SubmitRequest } from "./scheduler-types.ts";

export class SimScheduler {
  readonly pool: BlockPool;
  private readonly reqs = new Map<string, Req>();
  private readonly waiting: Req[] = [];
  private readonly running: Req[] = [];
  private arriving = 0;
  private submitted = 0;
  private stepTimer: TimerHandle | null = null;
  /** Set while a step is in flight (stepTimer may be null when it continues via `immediate`). */
  private stepping = false;
  private kick: TimerHandle | null = null;
  private readonly counters: SchedulerCounters = { prefixQueries: 0, prefixHits: 0, promptTokens: 0, generationTokens: 0, preemptions: 0, steps: 0 };
  private readonly kv: SchedulerKv;
  /** The queues, pool and counters above, for the parts in scheduler-batch.ts and scheduler-quiet.ts. */
  private readonly core: SchedulerCore;

  private readonly immediate: (fn: () => void) => void;
  /** With `fastForward`: the quiet-step windows (scheduler-quiet.ts). */
  private readonly quiet: QuietWindows | null;

  /**
   * `immediate` runs a continuation without waiting for a timer tick; on a real clock pass
   * setImmediate (a 0 ms setTimeout costs ~1 ms in Bun, which would put a floor under every step).
   */
  constructor(
    readonly cfg: SchedulerConfig,
    private readonly clock: Clock,
    onKvEvents: (events: KvEvent[]) => void = () => {},
    immediate?: (fn: () => void) => void,
  ) {
    this.pool = new BlockPool(cfg.numBlocks, cfg.blockSize, cfg.kvEvents ?? true);
    this.kv = new SchedulerKv(cfg, this.pool, onKvEvents);
    this.core = { cfg, pool: this.pool, kv: this.kv, waiting: this.waiting, running: this.running, counters: this.counters };
    this.immediate = immediate ?? ((fn) => void clock.setTimer(0, fn));
    const exact = clock as Partial<ExactClock>;
    if (cfg.fastForward === true && typeof exact.setTimerAt !== "function") throw new Error("SimScheduler fastForward needs a clock with setTimerAt (VirtualClock)");
    this.quiet = cfg.fastForward === true ? new QuietWindows(this.core, clock as ExactClock, (dueMs) => {
      this.stepping = false;
      this.nextStep(dueMs);
    }) : null;
  }

  /** Validate and queue a request; throws HerdError (400/503) as vLLM's API server would answer. */
  submit(sub: SubmitRequest): void {
    const n = sub.promptTokens.length;
    if (n === 0) throw badRequest("The decoder prompt cannot be empty", "prompt");
    // A sequence longer than the whole KV cache could never be scheduled, so it counts as too long too.
    const maxLen = Math.min(this.cfg.maxModelLen, this.cfg.numBlocks * this.cfg.blockSize);
    if (n + sub.maxTokens > maxLen) {
      throw badRequest(
        `This model's maximum context length is ${maxLen} tokens. However, you requested ${n + sub.maxTokens} tokens (${n} in the messages, ${sub.maxTokens} in the completion). Please reduce the length of the messages or completion.`,
        "max_tokens",
      );
    }
    if (this.waiting.length + this.arriving >= this.cfg.maxWaiting) {
      throw new HerdError(503, "service_unavailable", `waiting queue is full (${this.cfg.maxWaiting} requests)`, "queue_full", null, { "retry-after": "1" });
    }
    if (this.reqs.has(sub.id)) throw badRequest(`duplicate request id ${sub.id}`, "request_id");
    // vllm/v1/engine/processor.py: a priority without the priority policy is refused.
    if ((sub.priority ?? 0) !== 0 && this.cfg.policy !== "priority") throw badRequest(`Got priority ${sub.priority} but Priority scheduling is not enabled.`, "priority");
    const r = newReq(sub, this.clock.now(), this.submitted++);
    this.reqs.set(sub.id, r);
    this.arriving++;
    // The API server's own time (tokenize, template) passes before the engine core sees the request.
    this.clock.setTimer(this.cfg.cost.requestMs / this.cfg.timeScale, () => {
      if (r.state !== "arriving") return void this.arriving--; // aborted meanwhile
      if (this.kv.offload === null) return this.enqueue(r);
      this.lookupTier(r, this.kv.offload);
    });
  }

  private enqueue(r: Req): void {
    this.arriving--;
    if (r.state !== "arriving") return; // aborted meanwhile
    this.quiet?.interrupt();
    r.state = "waiting";
    addWaiting(this.core, r);
    this.wake();
  }

  /** Use a KV tier below the prefix cache (sim `--kv-offload-url`). */
  attachOffload(offload: SchedulerOffload): void {
    this.kv.offload = offload;
  }

  /** Ask the tier for the prompt blocks after the current GPU hit; the request queues when it answers. */
  private lookupTier(r: Req, offload: SchedulerOffload): void {
    const bs = this.cfg.blockSize;
    const maxBlocks = Math.floor((r.promptLen - 1) / bs);
    this.kv.extendHashes(r, maxBlocks);
    const from = this.pool.matchPrefix(r.hashes, maxBlocks).length;
    if (from >= maxBlocks) return this.enqueue(r);
    const herd = herdHashes(r, bs).slice(0, maxBlocks);
    let answered = false;
    offload.lookup(herd, from, (n) => {
      if (answered) return;
      answered = true;
      r.tierFrom = from;
      r.tierTo = from + Math.max(0, Math.min(n, maxBlocks - from));
      this.enqueue(r);
    });
  }

  /** Abort a request (client gone): frees its blocks at once. Unknown or finished ids are ignored. */
  abort(id: string): void {
    const r = this.reqs.get(id);
    if (r === undefined || r.state === "done") return;
    this.quiet?.interrupt();
    if (r.state === "waiting") this.waiting.splice(this.waiting.indexOf(r), 1);
    if (r.state === "running") this.running.splice(this.running.indexOf(r), 1);
    this.finish(r, "abort");
  }

  /** Abort every request (the host running this engine died). */
  abortAll(): void {
    for (const id of [...this.reqs.keys()]) this.abort(id);
  }

  /**
   * P/D decode side: take `n` free blocks for KV arriving from a remote prefill (vLLM allocates
   * them before the transfer, WAITING_FOR_REMOTE_KVS). Null when too few are free.
   */
  reserveBlocks(n: number): Block[] | null {
    this.quiet?.interrupt();
    return n === 0 ? [] : this.pool.allocate(n);
  }

  /**
   * The transfer into `blocks` (from reserveBlocks) completed: they hold the first blocks of
   * `prompt`, so enter them in the prefix cache under this engine's hashes (BlockStored events, as
   * vLLM caches externally computed blocks). The request submitted next finds them as a prefix hit.
   */
  commitImported(blocks: readonly Block[], prompt: ArrayLike<number>, lora: string | null, cacheSalt: string | null): void {
    if (blocks.length === 0) return;
    this.quiet?.interrupt();
    this.kv.storeImported(blocks, prompt, lora, cacheSalt);
  }

  /** Drop the references held by keepBlocks or reserveBlocks (tail first, as vLLM frees). */
  releaseBlocks(blocks: readonly Block[]): void {
    this.quiet?.interrupt();
    if (blocks.length > 0) this.pool.releaseTailFirst(blocks);
    this.wake(); // freed blocks may admit a waiting request
  }

  /** vLLM's /reset_prefix_cache: succeeds only when no request holds blocks. */
  resetPrefixCache(): boolean {
    this.quiet?.interrupt();
    const ok = this.pool.reset();
    if (ok) this.kv.flushEvents();
    return ok;
  }

  stats(): SchedulerStats {
    this.quiet?.catchUp(this.clock.now());
    return {
      running: this.running.length,
      waiting: this.waiting.length + this.arriving,
      kvUsage: this.pool.usage(),
      numBlocks: this.pool.numBlocks,
      freeBlocks: this.pool.numFree,
      cachedBlocks: this.pool.numCached,
      ...this.counters,
    };
  }

  /** True when nothing is queued, running or in a step. */
  get idle(): boolean {
    return this.reqs.size === 0 && !this.stepping;
  }

  private wake(): void {
    if (this.stepping || this.kick !== null) return;
    // Arrivals at the same instant share the next step.
    this.kick = this.clock.setTimer(0, () => {
      this.kick = null;
      this.startStep(this.clock.now());
    });
  }

  /**
   * Start a step that begins at `startMs` (its predecessor's planned end, so timer lateness does not
   * accumulate: steps shorter than a timer tick run back to back until the schedule has caught up).
   */
  private startStep(startMs: number): void {
    if (this.stepping) return;
    if (this.quiet !== null && this.quiet.start(startMs)) return void (this.stepping = true);
    const scheduled = schedule(this.core, this.clock);
    if (scheduled.length === 0) return;
    const ms = batchCostMs(this.core, scheduled) / this.cfg.timeScale;
    this.counters.steps++;
    this.stepping = true;
    const dueMs = startMs + ms;
    const end = () => {
      this.stepTimer = null;
      this.stepping = false;
      this.endStep(scheduled);
      this.nextStep(dueMs);
    };
    const delay = dueMs - this.clock.now();
    if (delay > 0) this.stepTimer = this.clock.setTimer(delay, end);
    else this.immediate(end);
  }

  /** After a step (or a window's last step) planned to end at `dueMs`: the next one starts. */
  private nextStep(dueMs: number): void {
    // Catch up at most MAX_LAG_MS behind schedule (after a stall, do not burst through a backlog).
    if (this.running.length > 0 || this.waiting.length > 0) this.startStep(Math.max(dueMs, this.clock.now() - MAX_LAG_MS));
  }

  /** `now`: when the step ended (a caught-up quiet step's own time, not the clock's). */
  private endStep(scheduled: Req[], now = this.clock.now()): void {
    for (const r of scheduled) {
      if (r.state !== "running") continue; // aborted during the step
      r.numComputed += r.sched;
      this.kv.storeFullBlocks(r);
      if (r.numComputed < seqLen(r)) continue; // prefill chunk, more to come
      const t = r.sub.nextToken(r.outputs);
      r.out.push(t.id);
      r.outputs++;
      this.counters.generationTokens++;
      r.firstTokenMs ??= now;
      let stop: boolean;
      try {
        stop = r.sub.handlers.onToken(t.id, r.outputs - 1, now) === true;
      } catch {
        // A broken consumer must not stop the engine loop: its request is aborted instead.
        this.abort(r.sub.id);
        continue;
      }
      if (r.state !== "running") continue; // the handler aborted it
      if (stop || (t.eos && !r.sub.ignoreEos)) this.finishRunning(r, "stop");
      else if (r.outputs >= r.sub.maxTokens) this.finishRunning(r, "length");
    }
    this.kv.flushEvents();
  }

  private finishRunning(r: Req, reason: FinishReason): void {
    this.running.splice(this.running.indexOf(r), 1);
    this.finish(r, reason);
  }

  private finish(r: Req, reason: FinishReason): void {
    r.state = "done";
    this.reqs.delete(r.sub.id);
    let keep = 0;
    if (reason !== "abort" && r.sub.keepBlocks !== undefined && r.blocks.length > 0) {
      try {
        keep = Math.max(0, Math.min(r.blocks.length, r.sub.keepBlocks(r.blocks, reason)));
      } catch {
        keep = 0;
      }
    }
    if (r.blocks.length > keep) this.pool.releaseTailFirst(keep === 0 ? r.blocks : r.blocks.slice(keep));
    r.blocks = [];
    const info: FinishInfo = {
      reason,
      promptTokens: r.promptLen,
      cachedTokens: r.cachedTokens,
      outputTokens: r.outputs,
      arrivalMs: r.arrivalMs,
      scheduledMs: r.scheduledMs,
      firstTokenMs: r.firstTokenMs,
      finishMs: this.clock.now(),
    };
    try {
      r.sub.handlers.onFinish(info);
    } catch {
      // The request is finished either way; a consumer's failure must not break the step loop.
    }
  }
}