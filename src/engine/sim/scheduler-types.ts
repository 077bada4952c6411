// The sim scheduler's public types (scheduler.ts re-exports them): its configuration, what a caller
// submits and hears back, the KV tier it may hand evictions to, and its stats.

import type { Block, BlockHash } from "./blocks.ts";
import type { CostParams } from "./cost.ts";

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
