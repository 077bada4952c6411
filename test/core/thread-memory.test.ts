// Worker threads' own memory (issue 22): the asker's bounds (deadline, at most a few questions out,
// a thread that is gone), that a thread's figures are its own heap and not the main thread's, the
// JSON guard's thread answering, and GET /admin/debug/memory listing threads by name with a stuck
// one reported as "timeout" instead of holding the route.
import { expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { measureThreadMemory, THREAD_MEMORY_PENDING_MAX, type ThreadMemory, ThreadMemoryAsker, type ThreadMemorySource } from "../../src/core/thread-memory.ts";
import { memoryAdminRoute, threadFigures } from "../../src/daemon/memory.ts";
import { JsonGuard } from "../../src/http/json-guard.ts";
import { TokenizerPool } from "../../src/preprocess/pool.ts";

const figures = (heap: number): ThreadMemory => ({ gc: true, heap_used_bytes: heap, heap_capacity_bytes: heap, extra_bytes: 0, array_buffers_bytes: 0, object_count: 1, top_object_types: [] });

test("the asker: an answer resolves its question, a silent thread times out, a full queue is busy, a gone thread is not running", async () => {
  const clock = new VirtualClock();
  const posted: number[] = [];
  let running = true;
  const a = new ThreadMemoryAsker(clock, (id) => (running ? (posted.push(id), true) : false));
  const first = a.ask(true, 1000);
  a.answer(posted[0]!, figures(7));
  expect(await first).toEqual(figures(7));

  const silent = Array.from({ length: THREAD_MEMORY_PENDING_MAX }, () => a.ask(false, 1000));
  expect(await a.ask(false, 1000)).toEqual({ error: "busy" });
  expect(a.outstanding).toBe(THREAD_MEMORY_PENDING_MAX);
  clock.advance(999);
  expect(a.outstanding).toBe(THREAD_MEMORY_PENDING_MAX);
  clock.advance(1);
  for (const s of silent) expect(await s).toEqual({ error: "timeout" });
  expect(a.outstanding).toBe(0);
  a.answer(posted[1]!, figures(1)); // a late answer to a question given up on is dropped

  const pending = a.ask(true, 1000);
  a.failAll();
  expect(await pending).toEqual({ error: "not_running" });
  running = false;
  expect(await a.ask(true, 1000)).toEqual({ error: "not_running" });
});

test("a worker thread's figures are its own heap: a thread holding 200k objects reports them, the main thread does not count them", async () => {
  const src = `const measureThreadMemory = ${measureThreadMemory.toString()};
const keep = [];
self.onmessage = (ev) => {
  if (ev.data === "grow") for (let i = 0; i < 200000; i++) keep.push({ i, s: "x" + i });
  self.postMessage(measureThreadMemory(true, require("bun:jsc").heapStats));
};`;
  const w = new Worker(URL.createObjectURL(new Blob([src], { type: "application/javascript" })));
  const ask = (m: string) => new Promise<ThreadMemory>((r) => ((w.onmessage = (e) => r(e.data)), w.postMessage(m)));
  try {
    const { heapStats } = await import("bun:jsc");
    const mainBefore = measureThreadMemory(true, heapStats);
    const before = await ask("measure");
    const after = await ask("grow");
    const mainAfter = measureThreadMemory(true, heapStats);
    expect(after.gc).toBe(true);
    expect(after.object_count - before.object_count).toBeGreaterThan(200_000);
    expect(after.heap_used_bytes - before.heap_used_bytes).toBeGreaterThan(4 << 20);
    expect(after.top_object_types.length).toBeGreaterThan(0);
    // The main thread's own count is not compared absolutely: under `bun test` every test file shares
    // this heap. What it must not show is the worker's 200k objects.
    expect(mainAfter.object_count - mainBefore.object_count).toBeLessThan(100_000);
  } finally {
    w.terminate();
  }
});

test("the JSON guard's thread: not running until a large body starts it, then answers with its heap", async () => {
  const guard = new JsonGuard({ inlineMaxChars: 16 });
  try {
    expect(await guard.memory(true, 5000)).toEqual({ error: "not_running" });
    const body = JSON.stringify({ pad: "x".repeat(1000) });
    const { parsed } = await guard.readJson(new Request("http://x/", { method: "POST", body }), 1 << 20, 1000);
    expect(parsed).toEqual({ pad: "x".repeat(1000) });
    const m = await guard.memory(true, 5000);
    expect("error" in m).toBe(false);
    expect((m as ThreadMemory).heap_used_bytes).toBeGreaterThan(0);
    expect((m as ThreadMemory).gc).toBe(true);
  } finally {
    guard.close();
  }
});

test("the tokenizer pool's threads: each answers with its own heap by name, a closed pool is not running", async () => {
  const pool = new TokenizerPool("", { workers: 2 });
  try {
    await pool.ready();
    const threads = pool.threads();
    expect(threads.map((t) => t.name)).toEqual(["tokenizer-0", "tokenizer-1"]);
    for (const t of threads) {
      const m = await t.memory(true, 5000);
      expect("error" in m).toBe(false);
      expect((m as ThreadMemory).heap_used_bytes).toBeGreaterThan(0);
      expect((m as ThreadMemory).gc).toBe(true);
    }
    // Jobs still flow beside the questions (the answer is not taken for a job's reply).
    expect((await pool.encode(["hello"]))[0]!.length).toBeGreaterThan(0);
    pool.close();
    expect(await threads[0]!.memory(false, 5000)).toEqual({ error: "not_running" });
  } finally {
    pool.close();
  }
});

test("GET /admin/debug/memory lists each thread by name; a stuck thread is a timeout, not a stalled route", async () => {
  const clock = new VirtualClock();
  const answering: ThreadMemorySource = { name: "kv-tier", memory: async (gc) => ({ ...figures(5), gc }) };
  const stuckAsker = new ThreadMemoryAsker(clock, () => true); // posted, never answered
  const stuck: ThreadMemorySource = { name: "nixl-metadata", memory: (gc, ms) => stuckAsker.ask(gc, ms) };
  const twin: ThreadMemorySource = { name: "kv-tier", memory: async () => ({ error: "not_running" }) };
  const route = memoryAdminRoute(() => [answering, stuck, twin]);
  const res = route.handle(new Request("http://x/admin/debug/memory?gc=1"), {});
  await Bun.sleep(0);
  clock.advance(60_000);
  const body = (await (await res).json()) as { gc: boolean; heap_bytes: number; threads: Record<string, unknown> };
  expect(body.gc).toBe(true);
  expect(body.heap_bytes).toBeGreaterThan(0);
  expect(body.threads).toEqual({ "kv-tier": figures(5), "nixl-metadata": { error: "timeout" }, "kv-tier#2": { error: "not_running" } });
  expect(await threadFigures([], false)).toEqual({});
});
