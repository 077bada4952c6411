// One generation request through the scheduler, answered as vLLM's OpenAI server would: an SSE stream
// of chunks (then an optional usage chunk and `data: [DONE]`) or one JSON response. A client that goes
// away aborts the request, which frees its KV blocks.

import type { Block } from "./blocks.ts";
import type { FinishReason, SimScheduler } from "./scheduler.ts";
import { wallClockMs } from "../../core/clock.ts";
import type { SimMetrics } from "./metrics.ts";
import type { OutputVocabulary } from "./output.ts";
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
  const id = requestId(g.endpoint);
  const head = { id, created: Math.floor(wallClockMs() / 1000), model: g.model };
  const out = ctx.vocab.stream(ctx.seed, g.promptTokens, g.ignoreEos ? 0 : ctx.outputLen);
  const stop = new StopMatcher(g.stop);
  const maxTokens = g.maxTokens ?? Math.max(1, ctx.maxModelLen - g.promptTokens.length);
  let prevMs: number | undefined;
  let arrivalMs = 0;
  let text = "";
  let finishReason: string | null = null;
  let stopReason: string | null = null;

  // Token → text delta, and whether this token ends the request (same rules the scheduler applies).
  const onTokenText = (index: number, nowMs: number): { delta: string; done: boolean } => {
    ctx.metrics.token(nowMs, prevMs, arrivalMs);
    prevMs = nowMs;
    const t = out.token(index);
    const r = stop.push(t.text);
    let delta = r.emit;
    if (r.stop !== null) {
      finishReason = "stop";
      stopReason = r.stop;
    } else if (t.eos && !g.ignoreEos) finishReason = "stop";
    else if (index + 1 >= maxTokens) finishReason = "length";
    if (finishReason !== null && r.stop === null) delta += stop.flush();
    text += delta;
    return { delta, done: finishReason !== null };
  };

  const abort = () => ctx.scheduler.abort(id);
  const submit = (onToken: (index: number, nowMs: number) => boolean, onFinish: Parameters<SimScheduler["submit"]>[0]["handlers"]["onFinish"]) => {
    ctx.scheduler.submit({
      id,
      promptTokens: g.promptTokens,
      maxTokens,
      ignoreEos: g.ignoreEos,
      lora: g.lora,
      cacheSalt: g.cacheSalt,
      ...(pd.keepBlocks ? { keepBlocks: (blocks: readonly Block[], reason: FinishReason) => pd.keepBlocks!(id, blocks, reason) } : {}),
      nextToken: (i) => {
        const t = out.token(i);
        return { id: t.id, eos: t.eos };
      },
      handlers: { onToken: (_tok, i, now) => onToken(i, now), onFinish },
    });
    arrivalMs = ctx.now();
    ctx.inflight.set(id, abort);
    signal.addEventListener("abort", abort, { once: true });
  };

  if (!g.stream) {
    return new Promise<Response>((resolve, reject) => {
      try {
        submit(
          (i, now) => {
            onTokenText(i, now);
            if (ctx.crash !== null) ctx.crash();
            return stopReason !== null;
          },
          (f) => {
            ctx.inflight.delete(id);
            ctx.metrics.finished(f);
            const params = pd.params?.(id) ?? null;
            pd.onDone?.();
            if (f.reason === "abort") return resolve(new Response(null, { status: 499 }));
            const u = usage(f.promptTokens, f.outputTokens, f.cachedTokens);
            resolve(Response.json(fullResponse(g.endpoint, head, text, finishReason ?? f.reason, stopReason, u, params)));
          },
        );
      } catch (e) {
        reject(e);
      }
    });
  }

  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let open = true;
  const send = (bytes: Uint8Array) => {
    if (!open) return;
    try {
      controller.enqueue(bytes);
    } catch {
      open = false;
    }
  };
  const close = () => {
    if (!open) return;
    open = false;
    try {
      controller.close();
    } catch {
      // already closed by a cancel
    }
  };
  const body = new ReadableStream<Uint8Array>({
    start: (c) => void (controller = c),
    cancel: () => {
      open = false;
      abort();
    },
  });
  let first = true;
  submit(
    (i, now) => {
      if (first && g.endpoint === "chat") send(sse(chunk("chat", head, "", { first: true })));
      first = false;
      const { delta, done } = onTokenText(i, now);
      if (delta !== "" || done) send(sse(chunk(g.endpoint, head, delta, { finish: finishReason, stopReason })));
      if (ctx.crash !== null) ctx.crash();
      return stopReason !== null;
    },
    (f) => {
      ctx.inflight.delete(id);
      ctx.metrics.finished(f);
      pd.params?.(id); // streamed answers carry no kv_transfer_params; drop them
      pd.onDone?.();
      if (f.reason !== "abort") {
        if (g.includeUsage) send(sse(usageChunk(g.endpoint, head, usage(f.promptTokens, f.outputTokens, f.cachedTokens))));
        send(DONE);
      }
      close();
    },
  );
  return new Response(body, { headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" } });
}
