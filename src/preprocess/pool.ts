// A small pool of tokenizer worker threads for one tokenizer directory. Jobs go to the worker with
// the fewest characters pending (a 128 KiB piece counts as much as a thousand short ones). The
// queue is bounded: beyond `maxPendingJobs` a request gets 503 instead of growing memory. A
// worker that dies is replaced and its jobs fail with a typed error; the daemon never crashes on it.
import { HerdError, unavailable, type OpenAIErrorType } from "../core/errors.ts";
import { type Clock, RealClock } from "../core/clock.ts";
import { type ThreadMemory, type ThreadMemoryAnswer, ThreadMemoryAsker, type ThreadMemorySource } from "../core/thread-memory.ts";
import { unpackChain, type PackedChain } from "./packed.ts";
import type { ChainJob, ChainResult, WorkerInfo } from "./worker.ts";
import type { WholeJob, WholeResult } from "./whole.ts";

export interface PoolOptions {
  /** Worker threads (default 2: the tokenizer is single-threaded and the host may have few cores). */
  workers?: number;
  maxPendingJobs?: number;
}

interface Job {
  resolve: (result: never) => void;
  reject: (e: Error) => void;
  chars: number;
}

interface Slot {
  worker: Worker | null;
  ready: Promise<WorkerInfo>;
  jobs: Map<number, Job>;
  pendingChars: number;
  /** GET /admin/debug/memory's questions, apart from `jobs` so they have deadlines of their own. */
  mem: ThreadMemoryAsker;
}

/** A worker that has not loaded its tokenizer by then is given up (ready() rejects). */
export const WORKER_START_TIMEOUT_MS = 60_000;

/**
 * Where worker.ts lives. From source, next to this file. In a `bun build --compile` binary (which
 * must list src/preprocess/worker.ts as an extra entry point) it is embedded under /$bunfs/root/,
 * at a path relative to the entry points' common directory: tried in order, absolute so a file of
 * the same name in the working directory is never picked up instead.
 */
function workerUrls(): string[] {
  const here = new URL("./worker.ts", import.meta.url).href;
  const m = /^(file:\/\/\/\$bunfs\/root\/)/.exec(import.meta.url);
  if (!m) return [here];
  return ["src/preprocess/worker.ts", "preprocess/worker.ts", "worker.ts"].map((p) => m[1] + p);
}

export class TokenizerPool {
  private readonly slots: Slot[] = [];
  private nextId = 1;
  private pending = 0;
  private closed = false;
  readonly maxPendingJobs: number;
  /** For the worker start timeout and the memory questions' deadlines (the pool's jobs have none of their own). */
  private readonly clock: Clock = new RealClock({ unref: true });

  constructor(
    private readonly dir: string,
    opts: PoolOptions = {},
  ) {
    this.maxPendingJobs = opts.maxPendingJobs ?? 4096;
    const n = Math.max(1, Math.min(16, opts.workers ?? 2));
    for (let i = 0; i < n; i++) this.slots.push(this.spawn());
  }

  /** Resolves when every worker has loaded the tokenizer (with what they found); rejects if one could not. */
  ready(): Promise<WorkerInfo> {
    return Promise.all(this.slots.map((s) => s.ready)).then((infos) => infos[0]!);
  }

  /** Encode texts on the least busy worker (pieces: without special tokens). */
  encode(texts: string[], addSpecialTokens = false): Promise<Uint32Array[]> {
    const chars = texts.reduce((a, t) => a + t.length, 0);
    return this.submit<Uint32Array[]>(chars, (id) => ({ op: "encode", id, texts, addSpecialTokens }));
  }

  /** Token ids → text on the least busy worker (vLLM /detokenize: the tokenizer's decode). */
  decode(tokens: number[]): Promise<string> {
    return this.submit<string>(tokens.length * 4, (id) => ({ op: "decode", id, tokens }));
  }

  /** Encode and hash a run of pieces on from a chain state (worker.ts `chain`). */
  chain(job: ChainJob): Promise<ChainResult> {
    let chars = 0;
    for (const it of job.items) chars += typeof it === "string" ? it.length : it.length;
    return this.submit<PackedChain>(chars, (id) => ({ op: "chain", id, ...job })).then(unpackChain);
  }

  /** A whole prompt: render, split, encode and hash on the thread (whole.ts). */
  whole(job: WholeJob): Promise<WholeResult> {
    const i = job.input;
    let chars = typeof i.prompt === "string" ? i.prompt.length : (i.prompt?.length ?? 0);
    for (const m of i.messages ?? []) chars += typeof m.content === "string" ? m.content.length : 16;
    return this.submit<WholeResult>(chars, (id) => ({ op: "whole", id, ...job }));
  }

  private submit<T>(chars: number, message: (id: number) => Record<string, unknown>): Promise<T> {
    if (this.closed) return Promise.reject(new HerdError(503, "server_error", "tokenizer pool closed", "shutting_down"));
    if (this.pending >= this.maxPendingJobs) {
      return Promise.reject(unavailable(`tokenizer queue full (${this.pending} jobs)`, "tokenizer_overloaded", 1));
    }
    let slot = this.slots[0]!;
    for (const s of this.slots) if (s.pendingChars < slot.pendingChars) slot = s;
    const id = this.nextId++;
    this.pending++;
    slot.pendingChars += chars;
    return new Promise<T>((resolve, reject) => {
      slot.jobs.set(id, { resolve: resolve as (r: never) => void, reject, chars });
      // Posted once the worker is up (a failed start fails the job through failAll).
      slot.ready.then(
        () => slot.worker?.postMessage(message(id)),
        () => {},
      );
    });
  }

  /**
   * Each thread as a GET /admin/debug/memory source (`<prefix>-<i>`). Read per question, so a
   * replaced worker is asked in its slot's place.
   */
  threads(prefix = "tokenizer"): ThreadMemorySource[] {
    return this.slots.map((_, i) => ({
      name: `${prefix}-${i}`,
      memory: (gc: boolean, timeoutMs: number): Promise<ThreadMemoryAnswer> => {
        const s = this.slots[i];
        return this.closed || !s ? Promise.resolve({ error: "not_running" }) : s.mem.ask(gc, timeoutMs);
      },
    }));
  }

  /** Jobs queued or running across the pool. */
  get pendingJobs(): number {
    return this.pending;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const s of this.slots) {
      this.failAll(s, new HerdError(503, "server_error", "tokenizer pool closed", "shutting_down"));
      s.worker?.terminate();
    }
  }

  private spawn(): Slot {
    const slot: Slot = {
      worker: null,
      ready: Promise.resolve({ added: [], segment: false, affixes: null }),
      jobs: new Map(),
      pendingChars: 0,
      mem: ThreadMemoryAsker.overWorker(this.clock, () => slot.worker, (id, gc) => ({ op: "memory", id, gc })),
    };
    slot.ready = this.start(slot, workerUrls());
    slot.ready.catch((e: Error) => this.failAll(slot, e)); // also surfaced through ready(); never unhandled
    return slot;
  }

  /** Start a worker from the first URL that loads; resolves when its tokenizer is loaded. */
  private start(slot: Slot, urls: string[]): Promise<WorkerInfo> {
    return new Promise<WorkerInfo>((resolve, reject) => {
      let started = false;
      const timer = this.clock.setTimer(WORKER_START_TIMEOUT_MS, () => {
        if (started) return;
        slot.worker?.terminate();
        reject(new HerdError(500, "server_error", `tokenizer worker did not start within ${WORKER_START_TIMEOUT_MS} ms`, "tokenizer_error"));
      });
      const attempt = (i: number) => {
        const worker = new Worker(urls[i]!);
        slot.worker = worker;
        worker.onmessage = (ev: MessageEvent) => {
          const m = ev.data as { op: string; id?: number; ids?: never; error?: string; info?: WorkerInfo; mem?: ThreadMemory; herd?: { status: number; type: OpenAIErrorType; code: string | null; param: string | null } };
          if (m.op === "memory") return slot.mem.answer(m.id!, m.mem!);
          if (m.op === "ready") {
            started = true;
            timer.cancel();
            return resolve(m.info!);
          }
          if (m.op === "failed") {
            timer.cancel();
            worker.terminate();
            return reject(new HerdError(500, "server_error", `tokenizer worker: ${m.error}`, "tokenizer_invalid"));
          }
          const job = m.id === undefined ? undefined : slot.jobs.get(m.id);
          if (!job) return;
          slot.jobs.delete(m.id!);
          slot.pendingChars -= job.chars;
          this.pending--;
          if (m.op === "done") job.resolve(m.ids!);
          else if (m.herd) job.reject(new HerdError(m.herd.status, m.herd.type, m.error ?? "", m.herd.code, m.herd.param));
          else job.reject(new HerdError(500, "server_error", `tokenization failed: ${m.error}`, "tokenizer_error"));
        };
        worker.onerror = (ev) => {
          if (!started) {
            // Not loadable from here (compiled binary layouts differ): try the next place.
            worker.terminate();
            if (i + 1 < urls.length) return attempt(i + 1);
            timer.cancel();
            return reject(new HerdError(500, "server_error", `tokenizer worker failed to start: ${ev.message}`, "tokenizer_error"));
          }
          // The thread is gone: fail its jobs and put a fresh worker in its place.
          this.failAll(slot, new HerdError(500, "server_error", `tokenizer worker died: ${ev.message}`, "tokenizer_error"));
          if (this.closed) return;
          const k = this.slots.indexOf(slot);
          if (k >= 0) this.slots[k] = this.spawn();
        };
        worker.postMessage({ op: "init", dir: this.dir });
      };
      attempt(0);
    });
  }

  private failAll(slot: Slot, err: Error): void {
    slot.mem.failAll();
    for (const job of slot.jobs.values()) job.reject(err);
    this.pending -= slot.jobs.size;
    slot.jobs.clear();
    slot.pendingChars = 0;
  }
}
