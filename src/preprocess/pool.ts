// A small pool of tokenizer worker threads for one tokenizer directory. Jobs go to the worker with
// the fewest characters pending (a 128 KiB piece counts as much as a thousand short ones). The
// queue is bounded: beyond `maxPendingJobs` a request gets 503 instead of growing memory. A
// worker that dies is replaced and its jobs fail with a typed error; the daemon never crashes on it.
import { HerdError, unavailable } from "../core/errors.ts";

export interface PoolOptions {
  /** Worker threads (default 2: the tokenizer is single-threaded and the host may have few cores). */
  workers?: number;
  maxPendingJobs?: number;
}

interface Job {
  resolve: (ids: Uint32Array[]) => void;
  reject: (e: Error) => void;
  chars: number;
}

interface Slot {
  worker: Worker;
  ready: Promise<void>;
  jobs: Map<number, Job>;
  pendingChars: number;
}

const WORKER_URL = new URL("./worker.ts", import.meta.url).href;

export class TokenizerPool {
  private readonly slots: Slot[] = [];
  private nextId = 1;
  private pending = 0;
  private closed = false;
  readonly maxPendingJobs: number;

  constructor(
    private readonly dir: string,
    opts: PoolOptions = {},
  ) {
    this.maxPendingJobs = opts.maxPendingJobs ?? 4096;
    const n = Math.max(1, Math.min(16, opts.workers ?? 2));
    for (let i = 0; i < n; i++) this.slots.push(this.spawn());
  }

  /** Resolves when every worker has loaded the tokenizer; rejects if one could not. */
  ready(): Promise<void> {
    return Promise.all(this.slots.map((s) => s.ready)).then(() => undefined);
  }

  /** Encode texts on the least busy worker (pieces: without special tokens). */
  encode(texts: string[], addSpecialTokens = false): Promise<Uint32Array[]> {
    if (this.closed) return Promise.reject(new HerdError(503, "server_error", "tokenizer pool closed", "shutting_down"));
    if (this.pending >= this.maxPendingJobs) {
      return Promise.reject(unavailable(`tokenizer queue full (${this.pending} jobs)`, "tokenizer_overloaded", 1));
    }
    let slot = this.slots[0]!;
    for (const s of this.slots) if (s.pendingChars < slot.pendingChars) slot = s;
    const id = this.nextId++;
    const chars = texts.reduce((a, t) => a + t.length, 0);
    this.pending++;
    slot.pendingChars += chars;
    return new Promise<Uint32Array[]>((resolve, reject) => {
      slot.jobs.set(id, { resolve, reject, chars });
      slot.worker.postMessage({ op: "encode", id, texts, addSpecialTokens });
    });
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
      s.worker.terminate();
    }
  }

  private spawn(): Slot {
    const worker = new Worker(WORKER_URL);
    const slot: Slot = { worker, ready: Promise.resolve(), jobs: new Map(), pendingChars: 0 };
    slot.ready = new Promise<void>((resolve, reject) => {
      worker.onmessage = (ev: MessageEvent) => {
        const m = ev.data as { op: string; id?: number; ids?: Uint32Array[]; error?: string };
        if (m.op === "ready") return resolve();
        if (m.op === "failed") return reject(new HerdError(500, "server_error", `tokenizer worker: ${m.error}`, "tokenizer_invalid"));
        const job = m.id === undefined ? undefined : slot.jobs.get(m.id);
        if (!job) return;
        slot.jobs.delete(m.id!);
        slot.pendingChars -= job.chars;
        this.pending--;
        if (m.op === "done") job.resolve(m.ids!);
        else job.reject(new HerdError(500, "server_error", `tokenization failed: ${m.error}`, "tokenizer_error"));
      };
    });
    slot.ready.catch(() => {}); // surfaced through ready(); never an unhandled rejection
    worker.onerror = (ev) => {
      // The thread is gone: fail its jobs and put a fresh worker in its place.
      this.failAll(slot, new HerdError(500, "server_error", `tokenizer worker died: ${ev.message}`, "tokenizer_error"));
      if (this.closed) return;
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots[i] = this.spawn();
    };
    worker.postMessage({ op: "init", dir: this.dir });
    return slot;
  }

  private failAll(slot: Slot, err: Error): void {
    for (const job of slot.jobs.values()) job.reject(err);
    this.pending -= slot.jobs.size;
    slot.jobs.clear();
    slot.pendingChars = 0;
  }
}
