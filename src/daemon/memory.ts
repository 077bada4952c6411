// GET /admin/debug/memory: what the daemon's memory is made of, for telling a leak from garbage
// collection. RSS alone cannot: JavaScriptCore collects when it decides to, and mimalloc returns freed
// pages to the OS lazily, so under load VmRSS is a sawtooth hundreds of MiB tall whatever is retained
// (docs/benchmarks.md "Soak"). The figures here split it: the JS heap (`heapSize`: live objects plus
// garbage not yet collected; after `?gc=1` only what survives a full collection), memory the heap
// accounts for outside it (`extraMemorySize`: ArrayBuffer and Buffer backing stores), what mimalloc has
// handed out (native allocations: sockets' buffers, the RESP tier's catalog) and the most numerous
// object types, the first thing to look at when the live heap grows. Sources: Bun's `bun:jsc`
// heapStats (https://bun.sh/docs/project/benchmarking#measuring-memory-usage) and `Bun.gc(true)`.
// `?gc=1` runs a full synchronous collection first (a few ms per 100 MiB of heap): admin-only, like
// every route here (src/admin/routes.ts), and meant for a soak or an operator, not a scraper.
// `threads` is the same for each worker thread herd runs (the KV tier, the NIXL metadata store, the
// JSON guard, the tokenizer pool's threads), measured on that thread (with `?gc=1` after a collection there): the main thread's
// heapStats() does not see their heaps (src/core/thread-memory.ts). All threads are asked at once,
// each answer bounded by THREAD_MEMORY_TIMEOUT_MS, so a stuck thread costs the route that long, no more.
// mimalloc's figures (malloc_bytes) are process-wide: every thread's native allocations and, since
// JavaScriptCore allocates its heaps through mimalloc in Bun, every thread's JS heap too.
import { heapStats } from "bun:jsc";
import type { AdminRoute } from "../http/admin-route.ts";
import type { ThreadMemoryAnswer, ThreadMemorySource } from "../core/thread-memory.ts";

/** How long the route waits for a worker thread's answer before reporting it as "timeout". */
export const THREAD_MEMORY_TIMEOUT_MS = 2000;

/** How many object types the answer lists, most numerous first (the heap has a few hundred). */
export const TOP_OBJECT_TYPES = 16;

export interface MemoryFigures {
  gc: boolean;
  rss_bytes: number;
  heap_bytes: number;
  heap_capacity_bytes: number;
  extra_bytes: number;
  object_count: number;
  protected_object_count: number;
  /** mimalloc's bytes in use (normal + huge allocations); null when Bun does not report them. */
  malloc_bytes: number | null;
  /** mimalloc's committed memory (what it holds from the OS, freed or not); null when not reported. */
  malloc_committed_bytes: number | null;
  top_object_types: [string, number][];
}

type Stat = { current?: number } | undefined;

export function memoryFigures(gc: boolean): MemoryFigures {
  if (gc) Bun.gc(true);
  const h = heapStats() as ReturnType<typeof heapStats> & { mimalloc?: { malloc_normal?: Stat; malloc_huge?: Stat; committed?: Stat } };
  const mi = h.mimalloc;
  const normal = mi?.malloc_normal?.current;
  const huge = mi?.malloc_huge?.current;
  return {
    gc,
    rss_bytes: process.memoryUsage.rss(),
    heap_bytes: h.heapSize,
    heap_capacity_bytes: h.heapCapacity,
    extra_bytes: h.extraMemorySize,
    object_count: h.objectCount,
    protected_object_count: h.protectedObjectCount,
    malloc_bytes: typeof normal === "number" ? normal + (huge ?? 0) : null,
    malloc_committed_bytes: mi?.committed?.current ?? null,
    top_object_types: Object.entries(h.objectTypeCounts).sort((a, b) => b[1] - a[1]).slice(0, TOP_OBJECT_TYPES),
  };
}

/** Every thread's answer by name, asked in parallel; a name given twice gets a `#2` suffix. */
export async function threadFigures(threads: readonly ThreadMemorySource[], gc: boolean, timeoutMs = THREAD_MEMORY_TIMEOUT_MS): Promise<Record<string, ThreadMemoryAnswer>> {
  const answers = await Promise.all(threads.map((t) => t.memory(gc, timeoutMs)));
  const out: Record<string, ThreadMemoryAnswer> = {};
  threads.forEach((t, i) => {
    let name = t.name;
    for (let n = 2; name in out; n++) name = `${t.name}#${n}`;
    out[name] = answers[i]!;
  });
  return out;
}

/** `threads`: the worker threads to ask, read at each request (a thread may start later). */
export function memoryAdminRoute(threads: () => readonly ThreadMemorySource[] = () => []): AdminRoute {
  return {
    method: "GET",
    path: "/debug/memory",
    handle: async (req) => {
      const gc = new URL(req.url).searchParams.get("gc") === "1";
      // The threads first: mimalloc's figures are the process's, so measured after every thread's
      // collection they count only what all of them still hold.
      const perThread = await threadFigures(threads(), gc);
      return Response.json({ ...memoryFigures(gc), threads: perThread });
    },
  };
}
