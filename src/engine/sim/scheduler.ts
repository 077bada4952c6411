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

import type { Clock, TimerHandle } from "../../core/clock.ts";
import { HerdError, badRequest } from "../../core/errors.ts";
import { blockHashes as herdBlockHashes } from "../../kv/hash.ts";
import { type Block, type BlockHash, BlockPool, type KvEvent, hashBlockOf } from "./blocks.ts";
import { type CostParams, chunkPairs, stepCostMs } from "./cost.ts";
import { planWindow, type WindowPlan } from "./fast-forward.ts";

const MAX_LAG_MS = 10;

export type FinishReason = "stop" | "length" | "abort";

export interface SchedulerConfig {
  blockSize: number;
  numBlocks: number;
  maxNumSeqs: number;
  maxNumBatchedTokens: number;
  /** Bound of the waiting queue (requests beyond it are refused with 503). */
  maxWaiting: number;
  maxModelLen: number;
  cost: CostParams;
  /** All durations are divided by this (20 = twenty times faster than real time). */
  timeScale: number;
  /** Seed of the block hash chain (vLLM: derived from PYTHONHASHSEED, random when unset). */
  hashSeed: bigint;
  /** vLLM's --scheduling-policy: "fcfs" (default) or "priority" (the requests' `priority`, lower first). */
  policy?: "fcfs" | "priority";
  /** false: no KV events are built (nobody listens, as in the planner day); the cache is the same. Default true. */
  kvEvents?: boolean;
  /**
   * Run quiet steps without a timer each (fast-forward.ts); needs a clock with `setTimerAt` (the
   * VirtualClock). Same results, with two costs the caller accepts: the tokens and KV events of a
   * quiet step reach their callbacks when the window is caught up (each token with its own step's
   * time, the clock reading later, each request's tokens together: `nextToken` must depend on its
   * index only), and an `onToken` must not stop or abort its request (it throws). Requests without
   * `ignoreEos` end windows. Default false.
   */
  fastForward?: boolean;
}

/** A clock that can set a timer at an exact time (VirtualClock). */
interface ExactClock extends Clock {
  setTimerAt(atMs: number, fn: () => void): TimerHandle;
}

/** A fast-forward window in progress: step `cur` is in flight (started, not ended); `cur === plan.steps` when all ended. */
interface Window {
  plan: WindowPlan;
  cur: number;
  /** The batch (the running requests when the window began, in order). */
  reqs: Req[];
  timer: TimerHandle;
}

/**
 * The engine-hash seed of block i of a request: vLLM hashes (parent, tokens, extra_keys) with the
 * LoRA name in every block's extra keys and cache_salt in block 0's (kv_cache_utils.py
 * generate_block_hash_extra_keys); here they perturb the seed of those blocks.
 */
function blockSeed(seed: bigint, sub: SubmitRequest, i: number): bigint {
  let s = seed;
  if (sub.lora) s ^= BigInt(Bun.hash.xxHash3(`lora:${sub.lora}`));
  if (i === 0 && sub.cacheSalt) s ^= BigInt(Bun.hash.xxHash3(`salt:${sub.cacheSalt}`));
  return s;
}

/**
 * A KV tier below the GPU prefix cache (offload.ts). The scheduler hands it the blocks its cache
 * evicts and asks it, before a request queues, how many of the prompt's blocks after the GPU hit it
 * can load; `done` may be called later (an asynchronous lookup plus the load time) or at once.
 * Blocks are named by herd's sequence hashes (kv/hash.ts) of the prompt's full blocks.
 */
export interface SchedulerOffload {
  offloadEvicted(engineHash: BlockHash, herdHash: bigint): void;
  lookup(herdHashes: readonly bigint[], fromBlock: number, done: (loadedBlocks: number) => void): void;
}

export interface FinishInfo {
  reason: FinishReason;
  promptTokens: number;
  cachedTokens: number;
  outputTokens: number;
  arrivalMs: number;
  /** When the request first got a place in a batch (undefined if it never did). */
  scheduledMs: number | undefined;
  firstTokenMs: number | undefined;
  finishMs: number;
}

export interface RequestHandlers {
  /** A sampled token. Return true to finish the request with reason "stop" (a stop string matched). */
  onToken(tokenId: number, index: number, nowMs: number): boolean | void;
  onFinish(info: FinishInfo): void;
}

export interface SubmitRequest {
  id: string;
  /** Token ids (a number[] or, cheaper to build and to hold, a Uint32Array). */
  promptTokens: ArrayLike<number>;
  maxTokens: number;
  /** The index-th output token; eos=true finishes the request with "stop" unless ignoreEos. */
  nextToken(index: number): { id: number; eos: boolean };
  ignoreEos: boolean;
  handlers: RequestHandlers;
  /** LoRA adapter (a --lora-modules name): an extra key of every block's hash, as in vLLM. */
  lora?: string | null;
  /** vLLM's cache_salt: an extra key of block 0's hash only. */
  cacheSalt?: string | null;
  /** vLLM's request `priority` (lower is served first); only under policy "priority", else must be 0. */
  priority?: number;
  /**
   * P/D prefill side (NixlConnector's request_finished delaying the free): called when the
   * request finishes normally, with its blocks; returns how many leading blocks the caller keeps
   * (it frees them later with releaseBlocks). The scheduler frees the rest. Absent = keep none.
   */
  keepBlocks?: (blocks: readonly Block[], reason: FinishReason) => number;
}

export interface SchedulerStats {
  running: number;
  waiting: number;
  kvUsage: number;
  numBlocks: number;
  freeBlocks: number;
  cachedBlocks: number;
  prefixQueries: number;
  prefixHits: number;
  promptTokens: number;
  generationTokens: number;
  preemptions: number;
  steps: number;
}

interface Req {
  sub: SubmitRequest;
  prompt: ArrayLike<number>;
  promptLen: number;
  out: number[]; // output token ids so far (the sequence is prompt ‖ out)
  sched: number; // tokens scheduled in the current step
  numComputed: number;
  blocks: Block[];
  hashes: BlockHash[]; // chained hashes of the full blocks of `tokens`, computed lazily
  numStored: number; // leading blocks already offered to the prefix cache
  outputs: number;
  cachedTokens: number;
  counted: boolean; // prefix-cache query recorded
  tierFrom: number; // with an offload tier: blocks [tierFrom, tierTo) of the prompt were loaded from it
  tierTo: number;
  herd: bigint[] | null; // herd sequence hashes of the prompt's full blocks (only with an offload tier)
  arrivalMs: number;
  /** Submission order: the last tie break of (priority, arrival). */
  seq: number;
  scheduledMs: number | undefined;
  firstTokenMs: number | undefined;
  state: "arriving" | "waiting" | "running" | "done";
}

/** vLLM's Request ordering under the priority policy: (priority, arrival_time), then submission. */
const before = (a: Req, b: Req) => {
  const pa = a.sub.priority ?? 0;
  const pb = b.sub.priority ?? 0;
  return pa !== pb ? pa < pb : a.arrivalMs !== b.arrivalMs ? a.arrivalMs < b.arrivalMs : a.seq < b.seq;
};

const seqLen = (r: Req) => r.promptLen + r.out.length;
const NO_TOKENS: readonly number[] = [];

/** Herd's sequence hashes of a request's full prompt blocks (kv/hash.ts), computed once. */
function herdHashes(r: Req, bs: number): bigint[] {
  r.herd ??= herdBlockHashes(r.prompt, bs, { lora: r.sub.lora ?? null, cacheSalt: r.sub.cacheSalt ?? null });
  return r.herd;
}

/** Token ids of the i-th block of a request's sequence (prompt ‖ outputs). */
function blockTokens(r: Req, i: number, bs: number): number[] {
  const from = i * bs;
  const out = new Array<number>(bs);
  for (let k = 0; k < bs; k++) {
    const j = from + k;
    out[k] = j < r.promptLen ? r.prompt[j]! : r.out[j - r.promptLen]!;
  }
  return out;
}

export class SimScheduler {
  readonly pool: BlockPool;
  private readonly reqs = new Map<string, Req>();
  private waiting: Req[] = [];
  private running: Req[] = [];
  private arriving = 0;
  private submitted = 0;
  private stepTimer: TimerHandle | null = null;
  /** Set while a step is in flight (stepTimer may be null when it continues via `immediate`). */
  private stepping = false;
  private offload: SchedulerOffload | null = null;
  /** With an offload tier: herd hash of each cached prompt block, by engine hash (bounded by the pool). */
  private readonly herdOf = new Map<BlockHash, bigint>();
  private kick: TimerHandle | null = null;
  private counters = { prefixQueries: 0, prefixHits: 0, promptTokens: 0, generationTokens: 0, preemptions: 0, steps: 0 };

  private readonly immediate: (fn: () => void) => void;
  private readonly exact: ExactClock | null;
  private window: Window | null = null;
  /** True while quiet steps are being caught up (their callbacks must not change the scheduler). */
  private folding = false;

  /**
   * `immediate` runs a continuation without waiting for a timer tick; on a real clock pass
   * setImmediate (a 0 ms setTimeout costs ~1 ms in Bun, which would put a floor under every step).
   */
  constructor(
    readonly cfg: SchedulerConfig,
    private readonly clock: Clock,
    private readonly onKvEvents: (events: KvEvent[]) => void = () => {},
    immediate?: (fn: () => void) => void,
  ) {
    this.pool = new BlockPool(cfg.numBlocks, cfg.blockSize, cfg.kvEvents ?? true);
    this.immediate = immediate ?? ((fn) => void clock.setTimer(0, fn));
    const exact = clock as Partial<ExactClock>;
    if (cfg.fastForward === true && typeof exact.setTimerAt !== "function") throw new Error("SimScheduler fastForward needs a clock with setTimerAt (VirtualClock)");
    this.exact = cfg.fastForward === true ? (clock as ExactClock) : null;
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
    const r: Req = {
      sub, prompt: sub.promptTokens, promptLen: n, out: [], sched: 0, numComputed: 0, blocks: [], hashes: [], numStored: 0, outputs: 0,
      cachedTokens: 0, counted: false, tierFrom: 0, tierTo: 0, herd: null, arrivalMs: this.clock.now(), seq: this.submitted++, scheduledMs: undefined, firstTokenMs: undefined, state: "arriving",
    };
    this.reqs.set(sub.id, r);
    this.arriving++;
    // The API server's own time (tokenize, template) passes before the engine core sees the request.
    this.clock.setTimer(this.cfg.cost.requestMs / this.cfg.timeScale, () => {
      if (r.state !== "arriving") return void this.arriving--; // aborted meanwhile
      if (this.offload === null) return this.enqueue(r);
      this.lookupTier(r, this.offload);
    });
  }

  private enqueue(r: Req): void {
    this.arriving--;
    if (r.state !== "arriving") return; // aborted meanwhile
    this.interrupt();
    r.state = "waiting";
    this.addWaiting(r);
    this.wake();
  }

  /** FCFS: at the back. Priority: in (priority, arrival) order (a heap in vLLM; a sorted array here). */
  private addWaiting(r: Req): void {
    if (this.cfg.policy !== "priority") return void this.waiting.push(r);
    let lo = 0;
    let hi = this.waiting.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (before(this.waiting[mid]!, r)) lo = mid + 1;
      else hi = mid;
    }
    this.waiting.splice(lo, 0, r);
  }

  /** Use a KV tier below the prefix cache (sim `--kv-offload-url`). */
  attachOffload(offload: SchedulerOffload): void {
    this.offload = offload;
  }

  /** Ask the tier for the prompt blocks after the current GPU hit; the request queues when it answers. */
  private lookupTier(r: Req, offload: SchedulerOffload): void {
    const bs = this.cfg.blockSize;
    const maxBlocks = Math.floor((r.promptLen - 1) / bs);
    this.extendHashes(r, maxBlocks);
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
    this.interrupt();
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
    this.interrupt();
    return n === 0 ? [] : this.pool.allocate(n);
  }

  /**
   * The transfer into `blocks` (from reserveBlocks) completed: they hold the first blocks of
   * `prompt`, so enter them in the prefix cache under this engine's hashes (BlockStored events, as
   * vLLM caches externally computed blocks). The request submitted next finds them as a prefix hit.
   */
  commitImported(blocks: readonly Block[], prompt: ArrayLike<number>, lora: string | null, cacheSalt: string | null): void {
    if (blocks.length === 0) return;
    this.interrupt();
    const bs = this.cfg.blockSize;
    const sub = { lora, cacheSalt } as SubmitRequest;
    const entries = [];
    let parent: BlockHash | null = null;
    const none: number[] = [];
    for (let i = 0; i < blocks.length; i++) {
      const hash = hashBlockOf(blockSeed(this.cfg.hashSeed, sub, i), parent, prompt, none, i * bs, (i + 1) * bs);
      const tokens = Array.from({ length: bs }, (_, k) => prompt[i * bs + k]!);
      entries.push({ block: blocks[i]!, hash, tokens });
      parent = hash;
    }
    this.pool.store(entries, null, 0, lora, cacheSalt);
    this.flushEvents();
  }

  /** Drop the references held by keepBlocks or reserveBlocks (tail first, as vLLM frees). */
  releaseBlocks(blocks: readonly Block[]): void {
    this.interrupt();
    if (blocks.length > 0) this.pool.releaseTailFirst(blocks);
    this.wake(); // freed blocks may admit a waiting request
  }

  /** vLLM's /reset_prefix_cache: succeeds only when no request holds blocks. */
  resetPrefixCache(): boolean {
    this.interrupt();
    const ok = this.pool.reset();
    if (ok) this.flushEvents();
    return ok;
  }

  stats(): SchedulerStats {
    this.catchUp(this.clock.now());
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
    if (this.exact !== null && this.startWindow(startMs, this.exact)) return;
    const scheduled = this.schedule();
    if (scheduled.length === 0) return;
    let tokens = 0;
    let pairs = 0;
    let ctx = 0;
    for (const r of scheduled) {
      const n = r.sched;
      tokens += n;
      if (r.outputs > 0 && n === 1 && r.numComputed === seqLen(r) - 1) ctx += r.numComputed + 1;
      else pairs += chunkPairs(r.numComputed, n);
    }
    const ms = stepCostMs(this.cfg.cost, { tokens, prefillPairs: pairs, decodeContextTokens: ctx }) / this.cfg.timeScale;
    this.counters.steps++;
    this.stepping = true;
    const dueMs = startMs + ms;
    const end = () => {
      this.stepTimer = null;
      this.stepping = false;
      this.endStep(scheduled);
      // Catch up at most MAX_LAG_MS behind schedule (after a stall, do not burst through a backlog).
      if (this.running.length > 0 || this.waiting.length > 0) this.startStep(Math.max(dueMs, this.clock.now() - MAX_LAG_MS));
    };
    const delay = dueMs - this.clock.now();
    if (delay > 0) this.stepTimer = this.clock.setTimer(delay, end);
    else this.immediate(end);
  }

  /** Start a fast-forward window when the next steps are quiet (fast-forward.ts); false otherwise. */
  private startWindow(startMs: number, clock: ExactClock): boolean {
    // Nothing can be admitted: the queue is empty, or the batch is at max_num_seqs (it stays so).
    if (this.offload !== null || (this.waiting.length > 0 && this.running.length < this.cfg.maxNumSeqs)) return false;
    const plan = planWindow(this.running, this.cfg, this.pool.numFree, startMs, clock.now(), MAX_LAG_MS);
    if (plan === null) return false;
    this.counters.steps++;
    this.stepping = true;
    const reqs = this.schedule();
    this.window = { plan, cur: 0, reqs, timer: clock.setTimerAt(plan.ends[plan.steps - 1]!, () => this.endWindow()) };
    return true;
  }

  /** Run the window's steps that have ended by `now`; the next one starts (its blocks are taken). */
  private catchUp(now: number): void {
    const w = this.window;
    if (w === null || this.folding) return;
    let c = w.cur;
    while (c < w.plan.steps && w.plan.ends[c]! <= now) c++;
    if (c === w.cur) return;
    this.folding = true;
    try {
      this.runQuiet(w, c);
    } finally {
      this.folding = false;
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
  private runQuiet(w: Window, c: number): void {
    const bs = this.cfg.blockSize;
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
    if (this.running.length !== reqs.length) throw new Error("SimScheduler fast-forward: the batch changed inside a quiet step");
    const byPhase: number[][] = Array.from({ length: bs }, () => []);
    for (let i = 0; i < reqs.length; i++) byPhase[base[i]! % bs]!.push(i);
    const events = this.cfg.kvEvents !== false;
    let dirty = true; // the step in flight took its blocks before this pass: its batch is flushed at its end
    for (let d = 1; d <= k; d++) {
      const bucket = byPhase[(bs - (d % bs)) % bs]!;
      for (const i of bucket) {
        const r = reqs[i]!;
        r.numComputed = base[i]! + d;
        this.storeFullBlocks(r);
      }
      if (events && (dirty || bucket.length > 0)) this.flushEvents();
      dirty = false;
      if (from + d < w.plan.steps) {
        this.counters.steps++;
        for (const i of bucket) reqs[i]!.blocks.push(...this.pool.allocate(1)!);
        dirty = bucket.length > 0;
      }
    }
    for (let i = 0; i < reqs.length; i++) reqs[i]!.numComputed = base[i]! + k;
    this.counters.generationTokens += reqs.length * k;
    w.cur = c;
  }

  /**
   * A change from outside during a window (an arrival, an abort, blocks taken or freed): the state
   * is brought to now, the step in flight ends as planned, and stepping goes on from there as usual.
   */
  private interrupt(): void {
    const w = this.window;
    if (w === null) return;
    if (this.folding) throw new Error("SimScheduler fast-forward: a callback of a quiet step changed the scheduler");
    this.catchUp(this.clock.now());
    if (w.cur >= w.plan.steps - 1) return;
    w.plan.steps = w.cur + 1;
    w.timer.cancel();
    w.timer = this.exact!.setTimerAt(w.plan.ends[w.cur]!, () => this.endWindow());
  }

  private endWindow(): void {
    const w = this.window!;
    this.catchUp(this.clock.now());
    this.window = null;
    this.stepping = false;
    if (this.running.length > 0 || this.waiting.length > 0) this.startStep(Math.max(w.plan.dues[w.cur - 1]!, this.clock.now() - MAX_LAG_MS));
  }

  /** Decide this step's batch; each request's `sched` says how many new tokens it computes. */
  private schedule(): Req[] {
    const bs = this.cfg.blockSize;
    const out: Req[] = [];
    let budget = this.cfg.maxNumBatchedTokens;
    let preempted = false;
    for (let i = 0; i < this.running.length && budget > 0; i++) {
      const r = this.running[i]!;
      const n = Math.min(seqLen(r) - r.numComputed, budget);
      if (n <= 0) continue;
      const need = Math.ceil((r.numComputed + n) / bs) - r.blocks.length;
      let ok = true;
      while (need > this.pool.numFree) {
        const victim = this.victim();
        // Under the priority policy the victim may sit before r (already scheduled this step): its
        // tokens go back to the budget and the loop index follows the shortened list (as vLLM does).
        if (this.running.indexOf(victim) < i) i--;
        this.preempt(victim);
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
      if (need > 0) r.blocks.push(...this.pool.allocate(need)!);
      r.sched = n;
      out.push(r);
      budget -= n;
    }
    // vLLM admits no new request in a step that had to preempt.
    while (!preempted && budget > 0 && this.waiting.length > 0 && this.running.length < this.cfg.maxNumSeqs) {
      const r = this.waiting[0]!;
      const hit = this.prefixHit(r);
      // Blocks loaded from the tier continue the GPU hit when it still reaches where the load began.
      const loaded = hit.length >= r.tierFrom && r.tierTo > hit.length ? r.tierTo - hit.length : 0;
      const cached = (hit.length + loaded) * bs;
      const n = Math.min(seqLen(r) - cached, budget);
      const need = Math.ceil((cached + n) / bs) - hit.length;
      let hitFree = 0;
      for (const b of hit) if (b.refCount === 0) hitFree++;
      if (need > this.pool.numFree - hitFree) break; // head-of-line blocking, FCFS
      this.waiting.shift();
      this.pool.touch(hit);
      r.blocks = hit; // a fresh array from matchPrefix
      for (const b of this.pool.allocate(need)!) hit.push(b);
      r.numComputed = cached;
      r.numStored = cached / bs - loaded;
      r.tierTo = 0; // a preempted request recomputes (its loaded copy is not kept)
      if (loaded > 0) this.storeFullBlocks(r); // the loaded blocks enter the prefix cache (BlockStored GPU)
      if (!r.counted) {
        r.counted = true;
        r.cachedTokens = cached;
        this.counters.prefixQueries += r.promptLen;
        this.counters.prefixHits += cached;
        this.counters.promptTokens += r.promptLen;
      }
      r.scheduledMs ??= this.clock.now();
      r.state = "running";
      this.running.push(r);
      r.sched = n;
      out.push(r);
      budget -= n;
    }
    return out;
  }

  /** Who is preempted when a running request needs a block: the last admitted (FCFS), or the largest (priority, arrival). */
  private victim(): Req {
    if (this.cfg.policy !== "priority") return this.running.at(-1)!;
    let v = this.running[0]!;
    for (const r of this.running) if (before(v, r)) v = r;
    return v;
  }

  /** Cached leading blocks of a request; at least one token is always left to compute (as in vLLM). */
  private prefixHit(r: Req): Block[] {
    const maxBlocks = Math.floor((seqLen(r) - 1) / this.cfg.blockSize);
    this.extendHashes(r, maxBlocks);
    return this.pool.matchPrefix(r.hashes, maxBlocks);
  }

  private extendHashes(r: Req, upTo: number): void {
    const bs = this.cfg.blockSize;
    for (let i = r.hashes.length; i < upTo; i++) {
      r.hashes.push(hashBlockOf(blockSeed(this.cfg.hashSeed, r.sub, i), i === 0 ? null : r.hashes[i - 1]!, r.prompt, r.out, i * bs, (i + 1) * bs));
    }
  }

  private preempt(r: Req): void {
    this.running.splice(this.running.indexOf(r), 1);
    this.pool.releaseTailFirst(r.blocks);
    r.blocks = [];
    r.numComputed = 0;
    r.numStored = 0;
    r.state = "waiting";
    // vLLM prepends a preempted request (FCFS); the priority queue re-inserts it in order.
    if (this.cfg.policy === "priority") this.addWaiting(r);
    else this.waiting.unshift(r);
    this.counters.preemptions++;
  }

  /** `now`: when the step ended (a caught-up quiet step's own time, not the clock's). */
  private endStep(scheduled: Req[], now = this.clock.now()): void {
    for (const r of scheduled) {
      if (r.state !== "running") continue; // aborted during the step
      r.numComputed += r.sched;
      this.storeFullBlocks(r);
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
    this.flushEvents();
  }

  private storeFullBlocks(r: Req): void {
    const bs = this.cfg.blockSize;
    const full = Math.floor(r.numComputed / bs);
    if (full <= r.numStored) return;
    this.extendHashes(r, full);
    const entries = [];
    const events = this.cfg.kvEvents !== false; // the token ids are for the BlockStored event only
    for (let i = r.numStored; i < full; i++) entries.push({ block: r.blocks[i]!, hash: r.hashes[i]!, tokens: events ? blockTokens(r, i, bs) : NO_TOKENS });
    this.pool.store(entries, r.numStored === 0 ? null : r.hashes[r.numStored - 1]!, r.numStored, r.sub.lora ?? null, r.sub.cacheSalt ?? null);
    if (this.offload !== null) this.noteHerdHashes(r, r.numStored, full);
    r.numStored = full;
  }

  /** Remember the herd hashes of newly cached prompt blocks, so an eviction can name them in the tier. */
  private noteHerdHashes(r: Req, from: number, to: number): void {
    const promptBlocks = Math.floor(r.promptLen / this.cfg.blockSize);
    if (from >= promptBlocks) return; // output blocks are not offloaded
    const herd = herdHashes(r, this.cfg.blockSize);
    for (let i = from; i < Math.min(to, promptBlocks); i++) {
      const b = r.blocks[i]!;
      if (b.hash === r.hashes[i]) this.herdOf.set(r.hashes[i]!, herd[i]!);
    }
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

  private flushEvents(): void {
    const ev = this.pool.takeEvents();
    if (ev.length === 0) return;
    if (this.offload !== null) this.offloadEvictions(ev, this.offload);
    this.onKvEvents(ev);
  }

  /** Evicted prompt blocks go to the tier (vLLM's offloading keeps what the GPU drops). */
  private offloadEvictions(ev: readonly KvEvent[], offload: SchedulerOffload): void {
    for (const e of ev) {
      if (e.type === "AllBlocksCleared") this.herdOf.clear();
      if (e.type !== "BlockRemoved") continue;
      for (const h of e.blockHashes) {
        const herd = this.herdOf.get(h);
        if (herd === undefined) continue;
        this.herdOf.delete(h);
        offload.offloadEvicted(h, herd);
      }
    }
  }
}
