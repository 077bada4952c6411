// The sim scheduler's record of one request and the state its parts share (scheduler.ts owns it;
// scheduler-batch.ts, scheduler-kv.ts and scheduler-quiet.ts read and change it).

import { blockHashes as herdBlockHashes } from "../../kv/hash.ts";
import type { Block, BlockHash, BlockPool } from "./blocks.ts";
import type { SchedulerKv } from "./scheduler-kv.ts";
import type { SchedulerConfig, SchedulerStats, SubmitRequest } from "./scheduler-types.ts";

/** A step starts at most this far behind its schedule (after a stall the loop does not burst through a backlog). */
export const MAX_LAG_MS = 10;

export interface Req {
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

/** A request as it arrives (the API server has not handed it to the engine core yet). */
export function newReq(sub: SubmitRequest, arrivalMs: number, seq: number): Req {
  return {
    sub, prompt: sub.promptTokens, promptLen: sub.promptTokens.length, out: [], sched: 0, numComputed: 0, blocks: [], hashes: [], numStored: 0, outputs: 0,
    cachedTokens: 0, counted: false, tierFrom: 0, tierTo: 0, herd: null, arrivalMs, seq, scheduledMs: undefined, firstTokenMs: undefined, state: "arriving",
  };
}

/** The cumulative part of SchedulerStats, which the scheduler counts as it goes. */
export type SchedulerCounters = Pick<SchedulerStats, "prefixQueries" | "prefixHits" | "promptTokens" | "generationTokens" | "preemptions" | "steps">;

/** What the scheduler's parts share: the queues, the pool and its bookkeeping, the counters (one object each, never replaced). */
export interface SchedulerCore {
  readonly cfg: SchedulerConfig;
  readonly pool: BlockPool;
  readonly kv: SchedulerKv;
  /** Waiting to be admitted, in admission order (FCFS or (priority, arrival)). */
  readonly waiting: Req[];
  /** Admitted, in admission order. */
  readonly running: Req[];
  readonly counters: SchedulerCounters;
}

/** vLLM's Request ordering under the priority policy: (priority, arrival_time), then submission. */
export const before = (a: Req, b: Req) => {
  const pa = a.sub.priority ?? 0;
  const pb = b.sub.priority ?? 0;
  return pa !== pb ? pa < pb : a.arrivalMs !== b.arrivalMs ? a.arrivalMs < b.arrivalMs : a.seq < b.seq;
};

export const seqLen = (r: Req) => r.promptLen + r.out.length;

/**
 * The engine-hash seed of block i of a request: vLLM hashes (parent, tokens, extra_keys) with the
 * LoRA name in every block's extra keys and cache_salt in block 0's (kv_cache_utils.py
 * generate_block_hash_extra_keys); here they perturb the seed of those blocks.
 */
export function blockSeed(seed: bigint, sub: Pick<SubmitRequest, "lora" | "cacheSalt">, i: number): bigint {
  let s = seed;
  if (sub.lora) s ^= BigInt(Bun.hash.xxHash3(`lora:${sub.lora}`));
  if (i === 0 && sub.cacheSalt) s ^= BigInt(Bun.hash.xxHash3(`salt:${sub.cacheSalt}`));
  return s;
}

/** Herd's sequence hashes of a request's full prompt blocks (kv/hash.ts), computed once. */
export function herdHashes(r: Req, bs: number): bigint[] {
  r.herd ??= herdBlockHashes(r.prompt, bs, { lora: r.sub.lora ?? null, cacheSalt: r.sub.cacheSalt ?? null });
  return r.herd;
}

/** Token ids of the i-th block of a request's sequence (prompt ‖ outputs). */
export function blockTokens(r: Req, i: number, bs: number): number[] {
  const from = i * bs;
  const out = new Array<number>(bs);
  for (let k = 0; k < bs; k++) {
    const j = from + k;
    out[k] = j < r.promptLen ? r.prompt[j]! : r.out[j - r.promptLen]!;
  }
  return out;
}
