// One generation request through the scheduler, answered as vLLM's OpenAI server would: an SSE stream
// of chunks (then an optional usage chunk and `data: [DONE]`) or one JSON response. A client that goes
// away aborts the request, which frees its KV blocks.

import type { Block } from "./blocks.ts";
import type { FinishReason, SimScheduler } from "./scheduler.ts";
import { wallClockMs } from "../../core/clock.ts";
import type { SimMetrics } from "./metrics.ts";
import type { OutputStream, OutputVocabulary } from "./output.ts";
import { StopMatcher } from "./output.ts";
import { chunk, fullResponse, type GenerationRequest, requestId, usage, usageChunk } from "./openai.ts";

export interface GenerateContext {
  scheduler: SimScheduler;
  metrics: SimMetrics;
  vocab: OutputVocabulary;
  seed: number;
  outputLen: number;
  maxModelLen: number;
  /** Called once after the first token has been sent when this request is the one that crashes the engine. */
  crash: (() => void) | null;
  now: () => number;
  /** Abort hooks of in-flight requests, so stop() can end them. */
  inflight: Map<string, () => void>;
}

/** P/D hooks of one request (pd.ts): the prefill leg's held blocks and answer, the decode leg's cleanup. */
export interface PdHooks {
  keepBlocks?: (requestId: string, blocks: readonly Block[], reason: FinishReason) => number;
  /** The response's top-level kv_transfer_params (non-streaming answers), read once at finish. */
  params?: (requestId: string) => Record<string, unknown> | null;
  /** Called once when the request is over, however it ended. */
  onDone?: () => void;
}

const enc = new TextEncoder();
const sse = (obj: unknown) => enc.encode(`data: ${JSON.stringify(obj)}\n\n`);
const DONE = enc.encode("data: [DONE]\n\n");

/** Submit to the scheduler; throws the scheduler's HerdError (400/503) before anything is sent. */
export function generate(ctx: GenerateContext, g: GenerationRequest, signal: AbortSignal, pd: PdHooks = {}): Response | Promise<Response> {
  const run = new Generation(ctx, g, signal, pd);
  return g.stream ? run.streamed() : run.whole();
}

type OnFinish = Parameters<SimScheduler["submit"]>[0]["handlers"]["onFinish"];
type Finished = Parameters<OnFinish>[0];

/** One request: its output text so far and why it finished, fed token by token by the scheduler. */
class Generation {
  private readonly id: string;
  private readonly head: { id: string; created: number; model: string };
  private readonly out: ReturnType<OutputVocabulary["stream"]>;
  private readonly stop: StopMatcher;
  private readonly maxTokens: number;
  /** Output tokens already given (a continuation starts after them); 0 otherwise. */
  private readonly offset: number;
  private prevMs: number | undefined;
  private arrivalMs = 0;
  private text = "";
  private finishReason: string | null = null;
  private stopReason: string | null = null;
  private readonly abort = () => this.ctx.scheduler.abort(this.id);

  constructor(private readonly ctx: GenerateContext, private readonly g: GenerationRequest, private readonly signal: AbortSignal, private readonly pd: PdHooks) {
    this.id = requestId(g.endpoint);
    this.head = { id: this.id, created: Math.floor(wallClockMs() / 1000), model: g.model };
    this.out = ctx.vocab.stream(ctx.seed, g.continuation?.seedTokens ?? g.promptTokens, g.ignoreEos ? 0 : ctx.outputLen);
    this.offset = g.continuation ? continuedAt(this.out, g.continuation.text, ctx.maxModelLen) : 0;
    this.stop = new StopMatcher(g.stop);
    this.maxTokens = g.maxTokens ?? Math.max(1, ctx.maxModelLen - g.promptTokens.length);
  }

  /** One JSON response once the request has finished. */
  whole(): Promise<Response> {
    const { g, head } = this;
    return new Promise<Response>((resolve, reject) => {
      try {
        this.submit(
          (i, now) => {
            this.tokenText(i, now);
            if (this.ctx.crash !== null) this.ctx.crash();
            return this.stopReason !== null;
          },
          (f) => {
            const params = this.release(f);
            if (f.reason === "abort") return resolve(new Response(null, { status: 499 }));
            const u = usage(f.promptTokens, f.outputTokens, f.cachedTokens);
            resolve(Response.json(fullResponse(g.endpoint, head, this.text, this.finishReason ?? f.reason, this.stopReason, u, params)));
          },
        );
      } catch (e) {
        reject(e);
      }
    });
  }

  /** An SSE stream: one chunk per token with text (chat opens with a role chunk), usage, [DONE]. */
  streamed(): Response {
    const { g, head } = this;
    const body = new SseBody(this.abort);
    let first = true;
    this.submit(
      (i, now) => {
        if (first && g.endpoint === "chat") body.send(sse(chunk("chat", head, "", { first: true })));
        first = false;
        const { delta, done } = this.tokenText(i, now);
        if (delta !== "" || done) body.send(sse(chunk(g.endpoint, head, delta, { finish: this.finishReason, stopReason: this.stopReason })));
        if (this.ctx.crash !== null) this.ctx.crash();
        return this.stopReason !== null;
      },
      (f) => {
        this.release(f); // streamed answers carry no kv_transfer_params; drop them
        if (f.reason !== "abort") {
          if (g.includeUsage) body.send(sse(usageChunk(g.endpoint, head, usage(f.promptTokens, f.outputTokens, f.cachedTokens))));
          body.send(DONE);
        }
        body.close();
      },
    );
    return new Response(body.stream, { headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" } });
  }

  private submit(onToken: (index: number, nowMs: number) => boolean, onFinish: OnFinish): void {
    const { ctx, g, pd, id } = this;
    ctx.scheduler.submit({
      id,
      promptTokens: g.promptTokens,
      maxTokens: this.maxTokens,
      ignoreEos: g.ignoreEos,
      lora: g.lora,
      cacheSalt: g.cacheSalt,
      priority: g.priority,
      ...(pd.keepBlocks ? { keepBlocks: (blocks: readonly Block[], reason: FinishReason) => pd.keepBlocks!(id, blocks, reason) } : {}),
      nextToken: (i) => {
        const t = this.out.token(this.offset + i);
        return { id: t.id, eos: t.eos };
      },
      handlers: { onToken: (_tok, i, now) => onToken(i, now), onFinish },
    });
    this.arrivalMs = ctx.now();
    ctx.inflight.set(id, this.abort);
    this.signal.addEventListener("abort", this.abort, { once: true });
  }

  // Token → text delta, and whether this token ends the request (same rules the scheduler applies).
  private tokenText(index: number, nowMs: number): { delta: string; done: boolean } {
    this.ctx.metrics.token(nowMs, this.prevMs, this.arrivalMs);
    this.prevMs = nowMs;
    const t = this.out.token(this.offset + index);
    const r = this.stop.push(t.text);
    let delta = r.emit;
    if (r.stop !== null) {
      this.finishReason = "stop";
      this.stopReason = r.stop;
    } else if (t.eos && !this.g.ignoreEos) this.finishReason = "stop";
    else if (index + 1 >= this.maxTokens) this.finishReason = "length";
    if (this.finishReason !== null && r.stop === null) delta += this.stop.flush();
    this.text += delta;
    return { delta, done: this.finishReason !== null };
  }

  /** The request is over: out of the in-flight map, into the metrics; the P/D answer, read once. */
  private release(f: Finished): Record<string, unknown> | null {
    this.ctx.inflight.delete(this.id);
    this.ctx.metrics.finished(f);
    const params = this.pd.params?.(this.id) ?? null;
    this.pd.onDone?.();
    return params;
  }
}

/** A streamed response body; writes after the client went away (or the stream closed) are dropped. */
class SseBody {
  readonly stream: ReadableStream<Uint8Array>;
  private controller!: ReadableStreamDefaultController<Uint8Array>;
  private open = true;

  constructor(onCancel: () => void) {
    this.stream = new ReadableStream<Uint8Array>({
      start: (c) => void (this.controller = c),
      cancel: () => {
        this.open = false;
        onCancel();
      },
    });
  }

  send(bytes: Uint8Array): void {
    if (!this.open) return;
    try {
      this.controller.enqueue(bytes);
    } catch {
      this.open = false;
    }
  }

  close(): void {
    if (!this.open) return;
    this.open = false;
    try {
      this.controller.close();
    } catch {
      // already closed by a cancel
    }
  }
}

/**
 * Where a continuation starts in the original output: the number of tokens whose text is `text`.
 * A text that is not a prefix of that output (not herd's own continuation) starts at 0.
 */
export function continuedAt(out: OutputStream, text: string, maxTokens: number): number {
  let acc = "";
  for (let i = 0; i < maxTokens && acc.length < text.length; i++) {
    const t = out.token(i);
    if (t.eos) break;
    acc += t.text;
    if (!text.startsWith(acc)) return 0;
    if (acc.length === text.length) return i + 1;
  }
  return 0;
}
