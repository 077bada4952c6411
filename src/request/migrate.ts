// Request migration (issue 21; Dynamo's `--migration-limit`): a chat stream whose worker dies or
// stalls after tokens reached the client is re-sent — the prompt plus the text generated so far as a
// final assistant message with vLLM's `continue_final_message` — to another worker with the
// remaining max_tokens, and the client sees one continuous stream: the same `id`, no second role
// delta, `usage` counting every token. Greedy decoding continues a prefix exactly where it stopped;
// sampling continues it plausibly.
//
// A ChunkSource between the engine's body and the relay (lifecycle.ts commit): it reads the SSE
// events as they pass (the id, the text, one token per content delta), and on a failure the relay
// would turn into an error event (reset, EOF before [DONE], idle timeout, worker down) it routes a
// continuation instead, at most `limit` times and never past `maxTokens` tokens sent. Off for what
// cannot be replayed exactly (not chat, n > 1, logprobs, guided decoding / response_format, tools,
// echo, a request that already continues a message); a non-streamed chat request reaches it as a
// stream herd collects (collect.ts). An abort as `drain` (a drain deadline: Frontend.migrateAway)
// migrates like a failure. The relay's abort handle follows the current
// attempt, so its idle deadline and the client's disconnect reach whichever worker is streaming.
// Counted in herd_migrations_total{reason, result}.
import { errorMessage } from "../core/errors.ts";
import type { UpstreamErrorKind } from "../metrics/herd-metrics.ts";
import type { LifecycleDeps } from "./lifecycle.ts";
import type { Leg } from "./plan.ts";
import { AbortCause, type Ticket } from "./ticket.ts";
import type { ChunkSource, ReadResult } from "./upstream.ts";

export interface MigrationConfig {
  /** frontend.migration_limit: re-sends per request (0 = off). */
  limit: number;
  /** frontend.migration_max_tokens: no migration past this many tokens sent. */
  maxTokens: number;
  /**
   * frontend.migration_collect_min_tokens: a non-streamed chat request is collected as a stream
   * (collect.ts) only when its max_tokens is absent or at least this. Absent = 0 (always).
   */
  collectMinTokens?: number;
}

/** The migration settings of a config's `frontend` section. */
export function migrationConfig(c: { frontend: { migration_limit: number; migration_max_tokens: number; migration_collect_min_tokens: number } }): MigrationConfig {
  return { limit: c.frontend.migration_limit, maxTokens: c.frontend.migration_max_tokens, collectMinTokens: c.frontend.migration_collect_min_tokens };
}

const NOT_REPLAYABLE = ["logprobs", "top_logprobs", "response_format", "structured_outputs", "echo", "continue_final_message", "prompt_logprobs"];

/** Why this leg's stream could not be continued exactly elsewhere; null when it can. */
export function notReplayable(leg: Leg): string | null {
  if (leg.endpoint !== "chat" || !leg.stream) return "not a chat stream";
  let b: Readonly<Record<string, unknown>>;
  try {
    b = leg.json ?? (JSON.parse(leg.body) as Record<string, unknown>);
  } catch {
    return "body";
  }
  if (b.n !== undefined && b.n !== null && b.n !== 1) return "n";
  for (const k of NOT_REPLAYABLE) if (b[k] !== undefined && b[k] !== null && b[k] !== false) return k;
  for (const k of Object.keys(b)) if (k.startsWith("guided_")) return k;
  if (Array.isArray(b.tools) && b.tools.length > 0) return "tools";
  if (!Array.isArray(b.messages)) return "messages";
  return null;
}

/** An observer of the events a MigratingSource passes on (parsed once, there). */
export interface EventTap {
  /** A data event's JSON, as it goes on (the engine's error events too). */
  event(o: Record<string, any>): void;
  /** Bytes that are not SSE as engines write it were passed on unread. */
  unreadable(): void;
}

interface Attempt {
  workerId: string;
  ac: AbortController;
  body: ChunkSource<Uint8Array>;
}

const enc = new TextEncoder();
/** An event longer than this without its blank line is not read (bounded buffer). */
const MAX_EVENT_CHARS = 1 << 20;

export class MigratingSource implements ChunkSource<Uint8Array> {
  /** What the relay aborts (idle deadline, client gone): always the attempt streaming now. */
  readonly handle: AbortController;
  private cur: Attempt;
  private readonly failed = new Set<string>();
  private dec = new TextDecoder();
  private buf = "";
  /** Sees every data event as it goes on (after any rewrite): the collect path's assembler (collect.ts). */
  tap: EventTap | null = null;
  private id: string | null = null;
  private text = "";
  /** Content deltas relayed (one token each), and how many came before the current attempt. */
  private tokens = 0;
  private base = 0;
  private migrations = 0;
  private sawDone = false;
  private sawError = false;
  /** The continuation's first delta repeats `role`: dropped. */
  private skipRole = false;

  constructor(
    private readonly d: LifecycleDeps<Uint8Array>,
    private readonly t: Ticket,
    private readonly leg: Leg,
    private readonly requestId: string,
    private readonly cfg: MigrationConfig,
    first: Attempt,
  ) {
    this.cur = first;
    const self = this;
    this.handle = {
      get signal() {
        return self.cur.ac.signal;
      },
      abort: (reason?: unknown) => self.cur.ac.abort(reason),
    } as AbortController;
  }

  /** The worker streaming now (for logs and metrics at the end). */
  get workerId(): string {
    return this.cur.workerId;
  }

  read(cb: (r: ReadResult<Uint8Array>) => void): void {
    const a = this.cur;
    a.body.read((r) => {
      if (a !== this.cur) return; // a late answer from an attempt that was replaced
      if ("error" in r || (r.done && !this.sawDone && !this.sawError)) return this.onFailure(r, cb);
      if (r.done) return cb(r);
      const out = this.pass(r.value);
      if (out === null) return this.read(cb); // only a partial event, or a dropped role delta
      cb({ done: false, value: out });
    });
  }

  cancel(): void {
    this.cur.body.cancel();
  }

  /** The chunk read before the commit point goes through the same bookkeeping. */
  first(chunk: Uint8Array | null): Uint8Array | null {
    return chunk === null ? null : this.pass(chunk);
  }

  /** Complete SSE events of a chunk, rewritten after a migration; null when nothing is complete. */
  private pass(chunk: Uint8Array): Uint8Array | null {
    const fresh = this.buf === "";
    // Events end with a blank line; CRLF line ends (allowed by SSE) are read as LF.
    let text = this.buf + this.dec.decode(chunk, { stream: true });
    const crlf = text.includes("\r");
    if (crlf) text = text.replaceAll("\r\n", "\n");
    let out = "";
    let start = 0;
    for (let i = text.indexOf("\n\n"); i >= 0; i = text.indexOf("\n\n", start)) {
      out += this.event(text.slice(start, i + 2));
      start = i + 2;
    }
    this.buf = text.slice(start);
    if (this.buf.length > MAX_EVENT_CHARS) {
      // Not SSE as engines write it: pass it on as is (and never migrate what could not be read).
      out += this.buf;
      this.buf = "";
      this.sawError = true;
      this.tap?.unreadable();
      return enc.encode(out);
    }
    if (out === "") return null;
    // Before any migration every event goes on unchanged: a chunk of whole events (it ends with the
    // blank line, so the decoder holds no partial character; no BOM the decoder dropped) is passed
    // on as the engine's own bytes instead of being encoded again.
    const n = chunk.byteLength;
    if (this.migrations === 0 && fresh && !crlf && this.buf === "" && n >= 2 && chunk[n - 1] === 10 && chunk[n - 2] === 10 && chunk[0] !== 0xef) return chunk;
    return enc.encode(out);
  }

  private event(ev: string): string {
    const m = /^data: ?(.*)$/m.exec(ev);
    if (!m) return ev;
    const data = m[1]!.trim();
    if (data === "[DONE]") {
      this.sawDone = true;
      return ev;
    }
    let o: Record<string, any>;
    try {
      o = JSON.parse(data) as Record<string, any>;
    } catch {
      return ev;
    }
    if (o.error !== undefined) {
      this.sawError = true;
      this.tap?.event(o);
      return ev;
    }
    this.id ??= typeof o.id === "string" ? o.id : null;
    const delta = o.choices?.[0]?.delta;
    const content = typeof delta?.content === "string" ? delta.content : "";
    if (content !== "") {
      // Past migration_max_tokens nothing will be re-sent: stop keeping the text (bounded memory).
      if (this.tokens < this.cfg.maxTokens) this.text += content;
      this.tokens++;
    }
    if (this.migrations === 0) {
      this.tap?.event(o);
      return ev;
    }
    if (this.skipRole && delta && delta.role !== undefined) {
      if (content === "") return "";
      delete delta.role;
    }
    if (content !== "") this.skipRole = false;
    if (this.id !== null) o.id = this.id;
    if (o.usage && typeof o.usage.completion_tokens === "number") {
      const completion = o.usage.completion_tokens + this.base;
      const prompt = Math.max(0, (o.usage.prompt_tokens ?? 0) - this.base);
      o.usage = { ...o.usage, prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
    }
    this.tap?.event(o);
    return `data: ${JSON.stringify(o)}\n\n`;
  }

  private onFailure(r: ReadResult<Uint8Array>, cb: (r: ReadResult<Uint8Array>) => void): void {
    const cause = this.cur.ac.signal.aborted ? this.cur.ac.signal.reason : null;
    if (cause instanceof AbortCause && (cause.kind === "client" || cause.kind === "client_stalled" || cause.kind === "shutdown" || cause.kind === "plan")) return cb(r);
    const reason: UpstreamErrorKind = cause instanceof AbortCause ? (cause.kind as UpstreamErrorKind) : "error" in r ? "reset" : "eof";
    const no = this.refusal();
    if (no !== null) {
      this.t.migration(reason, no);
      return cb(r);
    }
    this.migrate(reason, r, cb);
  }

  /** Why this stream may not migrate now (a metrics result), or null. */
  private refusal(): string | null {
    if (this.id === null || this.tokens === 0) return "nothing_sent";
    if (this.migrations >= this.cfg.limit) return "limit";
    if (this.tokens >= this.cfg.maxTokens) return "too_long";
    if (this.leg.maxTokens !== null && this.leg.maxTokens !== undefined && this.leg.maxTokens - this.tokens <= 0) return "nothing_left";
    return null;
  }

  private migrate(reason: UpstreamErrorKind, r: ReadResult<Uint8Array>, cb: (r: ReadResult<Uint8Array>) => void): void {
    const { d, t, leg } = this;
    const old = this.cur;
    t.upstreamFailed(old.workerId, reason);
    t.endAttempt(old.ac);
    old.body.cancel();
    this.failed.add(old.workerId);
    this.migrations++;
    let routed;
    try {
      routed = d.router.routeAndBook({ ...leg.route, exclude: this.failed });
    } catch {
      t.migration(reason, "no_worker");
      return cb(r);
    }
    t.migration(reason, "migrated");
    const { worker, lease } = routed;
    const ac = t.beginAttempt(worker.id, lease, null, true);
    const remaining = leg.maxTokens === null || leg.maxTokens === undefined ? null : leg.maxTokens - this.tokens;
    d.log.warn("stream migrated", { from: old.workerId, to: worker.id, reason, tokens_sent: this.tokens, migration: this.migrations });
    d.upstream.send(
      { id: `${this.requestId}.m${this.migrations}`, requestId: this.requestId, workerId: worker.id, workerUrl: worker.url, endpoint: "chat",
        body: this.continuation(remaining), stream: true, maxTokens: remaining },
      ac.signal,
      (reply) => {
        const body = "error" in reply ? null : reply.status === 200 ? reply.body : (reply.body?.cancel(), null);
        const why = "error" in reply ? errorMessage(reply.error) : `HTTP ${reply.status}`;
        if (body === null) {
          // The continuation never started: that worker failed too; try the next one within the limit.
          this.cur = { workerId: worker.id, ac, body: { read: (cb2) => cb2({ done: false, error: new Error(why) }), cancel: () => {} } };
          return this.read(cb);
        }
        this.cur = { workerId: worker.id, ac, body };
        this.base = this.tokens;
        this.skipRole = true;
        this.buf = "";
        this.dec = new TextDecoder(); // a partial character of the failed stream is not this one's
        this.read(cb);
      },
    );
  }

  /** The request again, the text so far as the assistant's message to continue, the tokens left. */
  private continuation(remaining: number | null): string {
    const b = JSON.parse(this.leg.body) as Record<string, unknown>;
    b.messages = [...(b.messages as unknown[]), { role: "assistant", content: this.text }];
    b.continue_final_message = true;
    b.add_generation_prompt = false;
    if (remaining !== null) {
      if (b.max_completion_tokens !== undefined && b.max_completion_tokens !== null) b.max_completion_tokens = remaining;
      else b.max_tokens = remaining;
    }
    return JSON.stringify(b);
  }
}
