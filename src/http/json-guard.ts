// JSON bodies parsed on the event loop only once their parse cost is known to be bounded: a body
// up to `inlineMaxBytes` is scanned inline (json-scan.ts, ≤ ~3 ms), a larger one on a helper thread
// (the scan of 10 MiB takes 20–150 ms); over `maxValues` values or MAX_JSON_DEPTH nesting it is a 400
// without ever being parsed here. Only then JSON.parse runs on the loop, on at most maxValues values.
//
// The thread runs scanJson from its own source text (a Blob URL), so it needs no extra entry point
// in the compiled binary. One thread, started on first use and unref'd; its queue is bounded (503).
import { HerdError, badRequest, unavailable } from "../core/errors.ts";
import { parseJson } from "./body.ts";
import { MAX_JSON_DEPTH, scanJson } from "./json-scan.ts";

export interface JsonGuardOptions {
  /** Bodies up to this many characters are scanned on the calling thread. Default 256 Ki. */
  inlineMaxChars?: number;
  /** Scans queued or running on the helper thread beyond this get 503. Default 256. */
  maxPending?: number;
}

type Verdict = ReturnType<typeof scanJson>;

const WORKER_SOURCE = `const scanJson = ${scanJson.toString()};
self.onmessage = (ev) => {
  const { id, text, maxValues, maxDepth } = ev.data;
  let verdict = null;
  try { verdict = scanJson(text, maxValues, maxDepth); } catch (e) { verdict = null; }
  self.postMessage({ id, verdict });
};`;

export function tooComplex(v: NonNullable<Verdict>, maxValues: number): HerdError {
  return v.over === "depth"
    ? badRequest(`request body nests deeper than ${MAX_JSON_DEPTH} levels`, null, "json_too_deep")
    : badRequest(`request body has more than ${maxValues} JSON values, the most this server accepts (frontend.max_json_values)`, null, "json_too_large");
}

export class JsonGuard {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, { resolve: (v: Verdict) => void; reject: (e: Error) => void }>();
  private nextId = 1;
  private closed = false;
  private readonly inlineMaxChars: number;
  private readonly maxPending: number;

  constructor(opts: JsonGuardOptions = {}) {
    this.inlineMaxChars = opts.inlineMaxChars ?? 256 * 1024;
    this.maxPending = opts.maxPending ?? 256;
  }

  /** Parse `text` as JSON, after refusing (400) a body whose parse would be unbounded. */
  async parse(text: string, maxValues: number): Promise<unknown> {
    const v = text.length <= this.inlineMaxChars ? scanJson(text, maxValues, MAX_JSON_DEPTH) : await this.scanOffLoop(text, maxValues);
    if (v !== null) throw tooComplex(v, maxValues);
    return parseJson(text);
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

  private scanOffLoop(text: string, maxValues: number): Promise<Verdict> {
    if (this.closed) return Promise.reject(new HerdError(503, "service_unavailable", "herd is stopping", "draining"));
    if (this.pending.size >= this.maxPending) return Promise.reject(unavailable(`request body checks queue full (${this.pending.size})`, "overloaded", 1));
    const w = this.ensureWorker();
    const id = this.nextId++;
    return new Promise<Verdict>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      w.postMessage({ id, text, maxValues, maxDepth: MAX_JSON_DEPTH });
    });
  }

  private ensureWorker(): Worker {
    if (this.worker) return this.worker;
    const url = URL.createObjectURL(new Blob([WORKER_SOURCE], { type: "application/javascript" }));
    const w = new Worker(url);
    w.unref();
    w.onmessage = (ev: MessageEvent<{ id: number; verdict: Verdict }>) => {
      const job = this.pending.get(ev.data.id);
      if (!job) return;
      this.pending.delete(ev.data.id);
      job.resolve(ev.data.verdict);
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
    for (const j of this.pending.values()) j.reject(e);
    this.pending.clear();
  }
}
