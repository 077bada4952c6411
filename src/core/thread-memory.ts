// A worker thread's own memory, as that thread sees it (issue 22: the soak's RSS floor rose with
// P/D on while the main thread's live heap stayed flat). Each Bun Worker has its own JavaScriptCore
// heap, which `heapStats()` and `process.memoryUsage()` on the main thread do not count; asked on the
// thread itself they report that thread's heap (checked with Bun 1.4: a Worker that retains 200k
// objects reports ~19 MiB `heapUsed` while the main thread's stays at 0.3 MiB). So every thread herd
// runs (the KV tier, the NIXL metadata store, the JSON guard, the tokenizer pool) answers a `memory` message with
// `measureThreadMemory` (GET /admin/debug/memory, src/frontend/README.md; what it showed:
// docs/benchmarks.md "Soak with every thread measured"), and the daemon's side asks through
// `ThreadMemoryAsker`: at most a few questions out, each with a deadline, so a stuck thread makes its
// own entry say "timeout" instead of stalling GET /admin/debug/memory.
// Sources: Bun's `Bun.gc(true)` and `bun:jsc` heapStats (https://bun.sh/docs/project/benchmarking).
import type { heapStats } from "bun:jsc";
import type { Clock } from "./clock.ts";

type HeapStats = ReturnType<typeof heapStats>;

export interface ThreadMemory {
  /** Whether a full synchronous collection ran on the thread first (then heap_used_bytes is the live heap). */
  gc: boolean;
  heap_used_bytes: number;
  heap_capacity_bytes: number;
  /** Memory the heap accounts for outside it (ArrayBuffer and Buffer backing stores, strings' buffers). */
  extra_bytes: number;
  array_buffers_bytes: number;
  object_count: number;
  /** The thread's most numerous object types, most numerous first. */
  top_object_types: [string, number][];
}

/**
 * Measure the calling thread's heap (after a full collection when `gc`); `heapStats` is `bun:jsc`'s,
 * passed in. Self-contained on purpose (no imports, no closures): json-guard.ts embeds its source
 * text in a Blob-URL worker, which gets `heapStats` from its own `require("bun:jsc")`.
 */
export function measureThreadMemory(gc: boolean, heapStats: () => HeapStats): ThreadMemory {
  if (gc) Bun.gc(true);
  const h = heapStats();
  const mu = process.memoryUsage();
  return {
    gc,
    heap_used_bytes: h.heapSize,
    heap_capacity_bytes: h.heapCapacity,
    extra_bytes: h.extraMemorySize,
    array_buffers_bytes: mu.arrayBuffers,
    object_count: h.objectCount,
    top_object_types: Object.entries(h.objectTypeCounts)
      .sort((a, b) => b[1] - a[1])
      .slice(0, 8),
  };
}

/** One thread's answer in GET /admin/debug/memory: its figures, or why there are none. */
export type ThreadMemoryAnswer = ThreadMemory | { error: "timeout" | "not_running" | "busy" };

/** A thread the daemon can ask (the route lists them by name). */
export interface ThreadMemorySource {
  readonly name: string;
  memory(gc: boolean, timeoutMs: number): Promise<ThreadMemoryAnswer>;
}

/** Questions out to one thread beyond which the next is refused ("busy") rather than queued. */
export const THREAD_MEMORY_PENDING_MAX = 4;

/**
 * The daemon's side of one thread's `memory` messages. `post(id, gc)` sends the question and
 * returns false when there is no thread to send it to; the owner calls `answer` with the thread's
 * reply and `failAll` when the thread is gone.
 */
export class ThreadMemoryAsker {
  /** An asker posting `message(id, gc)` to the worker `worker()` returns; none yet = not running. */
  static overWorker(clock: Clock, worker: () => { postMessage(m: unknown): void } | null | undefined, message: (id: number, gc: boolean) => unknown): ThreadMemoryAsker {
    return new ThreadMemoryAsker(clock, (id, gc) => {
      const w = worker();
      if (!w) return false;
      w.postMessage(message(id, gc));
      return true;
    });
  }

  private nextId = 1;
  private readonly pending = new Map<number, (a: ThreadMemoryAnswer) => void>();

  constructor(
    private readonly clock: Clock,
    private readonly post: (id: number, gc: boolean) => boolean,
  ) {}

  ask(gc: boolean, timeoutMs: number): Promise<ThreadMemoryAnswer> {
    if (this.pending.size >= THREAD_MEMORY_PENDING_MAX) return Promise.resolve({ error: "busy" });
    const id = this.nextId++;
    return new Promise((resolve) => {
      const timer = this.clock.setTimer(timeoutMs, () => {
        this.pending.delete(id);
        resolve({ error: "timeout" });
      });
      this.pending.set(id, (a) => {
        timer.cancel();
        resolve(a);
      });
      if (!this.post(id, gc)) this.settle(id, { error: "not_running" });
    });
  }

  answer(id: number, m: ThreadMemory): void {
    this.settle(id, m);
  }

  failAll(): void {
    for (const id of [...this.pending.keys()]) this.settle(id, { error: "not_running" });
  }

  get outstanding(): number {
    return this.pending.size;
  }

  private settle(id: number, a: ThreadMemoryAnswer): void {
    const r = this.pending.get(id);
    this.pending.delete(id);
    r?.(a);
  }
}
