// JSON bodies parsed on the event loop only once their parse cost is known to be bounded: a body
// up to `inlineMaxChars` bytes is scanned inline (json-scan.ts, ≤ ~3 ms), a larger one is joined,
// scanned and decoded on a helper thread (for 10 MiB: scan 20–150 ms, join + UTF-8 decode ~50 ms
// on the loaded dev box); over `maxValues` values or MAX_JSON_DEPTH nesting it is a 400 without
// ever being decoded or parsed here. Only then JSON.parse runs on the loop, on at most maxValues values.
//
// The thread runs scanJson from its own source text (a Blob URL), so it needs no extra entry point
// in the compiled binary. One thread, started on first use and unref'd; its queue is bounded (503).
import { HerdError, badRequest, unavailable } from "../core/errors.ts";
import { parseJson, readBodyChunks } from "./body.ts";
import { MAX_JSON_DEPTH, scanJson, scanJsonBytes } from "./json-scan.ts";
import { type Clock, RealClock } from "../core/clock.ts";
import { measureThreadMemory, type ThreadMemory, type ThreadMemoryAnswer, ThreadMemoryAsker } from "../core/thread-memory.ts";

export interface JsonGuardOptions {
  /** Bodies up to this many bytes are scanned on the calling thread. Default 256 Ki. */
  inlineMaxChars?: number;
  /** Scans queued or running on the helper thread beyond this get 503. Default 256. */
  maxPending?: number;
  /** For the deadlines of memory questions (GET /admin/debug/memory). Default: real time. */
  clock?: Clock;
}

type Verdict = ReturnType<typeof scanJson>;
type Answer = { verdict: Verdict; text: string | null };

// On the thread: join the chunks, scan the bytes, and only for a body within bounds decode it to
// text (the event loop then gets a string copy, no UTF-8 decoding of its own).
// A `memory` question (GET /admin/debug/memory) is answered with the thread's own heap.
const WORKER_SOURCE = `const scanJsonBytes = ${scanJsonBytes.toString()};
const measureThreadMemory = ${measureThreadMemory.toString()};
self.onmessage = (ev) => {
  if (ev.data.memory !== undefined) return self.postMessage({ memory: ev.data.memory, m: measureThreadMemory(ev.data.gc, require("bun:jsc").heapStats) });
  const { id, chunks, bytes, maxValues, maxDepth } = ev.data;
  let all = chunks.length === 1 ? chunks[0] : new Uint8Array(bytes);
  if (chunks.length !== 1) { let off = 0; for (const c of chunks) { all.set(c, off); off += c.byteLength; } }
  const verdict = scanJsonBytes(all, maxValues, maxDepth);
  self.postMessage({ id, verdict, text: verdict === null ? new TextDecoder().decode(all) : null });
};`;

export function tooComplex(v: NonNullable<Verdict>, maxValues: number): HerdError {
  return v.over === "depth"
    ? badRequest(`request body nests deeper than ${MAX_JSON_DEPTH} levels`, null, "json_too_deep")
    : badRequest(`request body has more than ${maxValues} JSON values, the most this server accepts (frontend.max_json_values)`, null, "json_too_large");
}

/** Decodes without `stream`, so one instance serves every call (no state is kept between them). */
const utf8 = new TextDecoder();

/** A body small enough to scan on the calling thread: decoded, bounded, parsed. */
function parseInline(chunks: Uint8Array[], bytes: number, maxValues: number): { text: string; parsed: unknown } {
  const text = utf8.decode(chunks.length === 1 ? chunks[0] : Buffer.concat(chunks, bytes));
  const v = scanJson(text, maxValues, MAX_JSON_DEPTH);
  if (v !== null) throw tooComplex(v, maxValues);
  return { text, parsed: parseJson(text) };
}

export class JsonGuard {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, { resolve: (v: Answer) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private bodyBytes = 0;
  private closed = false;
  private readonly inlineMaxChars: number;
  private readonly maxPending: number;
  readonly name = "json-guard";
  /** GET /admin/debug/memory's questions (the deadlines only: no scan has one). */
  private readonly mem: ThreadMemoryAsker;

  constructor(opts: JsonGuardOptions = {}) {
    this.mem = ThreadMemoryAsker.overWorker(opts.clock ?? new RealClock({ unref: true }), () => this.worker, (id, gc) => ({ memory: id, gc }));
    this.inlineMaxChars = opts.inlineMaxChars ?? 256 * 1024;
    this.maxPending = opts.maxPending ?? 256;
  }

  /**
   * Read a request body (limits and errors of http/body.ts) and parse it as JSON, after refusing
   * (400) a body whose parse would be unbounded. A body over `inlineMaxChars` bytes is joined,
   * scanned and decoded on the helper thread; the event loop only parses what passed.
   */
  async readJson(req: Request, limitBytes: number, maxValues: number, budgetBytes = Infinity): Promise<{ text: string; parsed: unknown }> {
    // Bytes of all bodies being read and checked at once stay under the budget (at least one whole
    // body fits): herd's memory for bodies is bounded, not max_in_flight × max_body_bytes.
    const budget = Math.max(budgetBytes, limitBytes);
    let held = 0;
    const reserve = (n: number) => {
      if (this.bodyBytes + n > budget) throw unavailable(`request bodies being read exceed ${budget} bytes (frontend.max_body_bytes_in_flight); retry`, "bodies_over_budget", 1);
      this.bodyBytes += n;
      held += n;
    };
    try {
      const { chunks, bytes } = await readBodyChunks(req, limitBytes, reserve);
      // A small body is decoded, scanned and parsed here without another await (one async layer
      // fewer per request on the hot path); a large one is checked on the helper thread.
      return bytes <= this.inlineMaxChars ? parseInline(chunks, bytes, maxValues) : await this.parseOffLoop(chunks, bytes, maxValues);
    } finally {
      this.bodyBytes -= held;
    }
  }

  /** Bytes of request bodies currently held by readJson (for the budget and tests). */
  get bodyBytesInFlight(): number {
    return this.bodyBytes;
  }

  private async parseOffLoop(chunks: Uint8Array[], bytes: number, maxValues: number): Promise<{ text: string; parsed: unknown }> {
    const r = await this.scanOffLoop(chunks, bytes, maxValues);
    if (r.verdict !== null) throw tooComplex(r.verdict, maxValues);
    const text = r.text ?? "";
    return { text, parsed: parseJson(text) };
  }

  /** The helper thread's own heap; "not_running" before the first large body started it. */
  memory(gc: boolean, timeoutMs: number): Promise<ThreadMemoryAnswer> {
    return this.mem.ask(gc, timeoutMs);
  }

  /** Scans queued or running on the helper thread. */
  get pendingScans(): number {
    return this.pending.size;
  }

  close(): void {
    this.closed = true;
    this.failAll(new HerdError(503, "service_unavailable", "herd is stopping", "draining"));
    this.worker?.terminate();
    this.worker = null;
  }

  private scanOffLoop(chunks: Uint8Array[], bytes: number, maxValues: number): Promise<Answer> {
    if (this.closed) return Promise.reject(new HerdError(503, "service_unavailable", "herd is stopping", "draining"));
    if (this.pending.size >= this.maxPending) return Promise.reject(unavailable(`request body checks queue full (${this.pending.size})`, "overloaded", 1));
    const w = this.ensureWorker();
    const id = this.nextId++;
    return new Promise<Answer>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      // Joined into one fresh buffer and transferred: cloning the chunks copied each one's whole
      // underlying buffer (2.9 s of the loop in a 10 s worst-case run); one memcpy costs ~3 ms.
      const all = new Uint8Array(bytes);
      let off = 0;
      for (const c of chunks) {
        all.set(c, off);
        off += c.byteLength;
      }
      w.postMessage({ id, chunks: [all], bytes, maxValues, maxDepth: MAX_JSON_DEPTH }, [all.buffer]);
    });
  }

  private ensureWorker(): Worker {
    if (this.worker) return this.worker;
    const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "application/javascript" }));
    const w = new Worker(url);
    w.unref();
    w.onmessage = (ev: MessageEvent<{ id: number; verdict: Verdict; text: string | null } | { memory: number; m: ThreadMemory }>) => {
      if ("memory" in ev.data) return this.mem.answer(ev.data.memory, ev.data.m);
      const job = this.pending.get(ev.data.id);
      if (!job) return;
      this.pending.delete(ev.data.id);
      job.resolve({ verdict: ev.data.verdict, text: ev.data.text });
    };
    w.onerror = (ev) => {
      // The thread is gone: fail its scans (500, never a crash) and start a fresh one on next use.
      this.failAll(new HerdError(500, "server_error", `request body check failed: ${ev.message}`, "internal_error"));
      w.terminate();
      if (this.worker === w) this.worker = null;
    };
    this.worker = w;
    return w;
  }

  private failAll(e: Error): void {
    this.mem.failAll();
    for (const j of this.pending.values()) j.reject(e);
    this.pending.clear();
  }
}
