// Non-streaming chat requests migrate too (issue 21). An engine's non-streamed answer is one JSON
// document sent when generation is over, so a worker that dies mid-generation leaves nothing to
// continue from. herd therefore asks the engine for a stream instead (`stream: true`,
// `stream_options.include_usage`), runs it through the same MigratingSource a client's stream gets
// (migrate.ts: on a failure the text so far continues on another worker), accumulates the events
// here, and answers the client with one ordinary `chat.completion`: the first attempt's `id`, the
// whole content, `usage` over every token, the last `finish_reason`.
//
// The assembled document has the field set of vLLM's non-streamed ChatCompletionResponse
// (vllm-project/vllm, vllm/entrypoints/openai/protocol.py: ChatCompletionResponse,
// ChatCompletionResponseChoice, ChatMessage — the same set src/engine/sim/openai.ts fullResponse
// emits). Only requests migration could replay exactly are collected (notReplayable: not n > 1,
// logprobs, response_format / guided decoding, tools, echo); a request that names
// `stream_options` while not streaming is left to the engine, which refuses it. /v1/completions is
// not collected: prompt + generated text re-tokenizes to other ids at the seam, so a completion is
// not continued exactly (docs/cluster.md).
//
// Only when it is worth it (frontend.migration_collect_min_tokens, default 64): collecting costs
// every request the engine's SSE framing and herd's reading of one event per token — about a third
// of herd's non-streamed throughput at a zero-delay engine (docs/benchmarks.md, "Non-streamed
// migration on the hot path") — while what it saves is the regeneration of the tokens already made
// when an engine dies mid-answer. A non-streamed request with a small max_tokens is therefore sent
// as the client asked. Its guarantee is unchanged: nothing reaches the client before the engine's
// whole answer, so an engine that dies (reset or EOF before the answer) fails the attempt before
// the commit point and the request is re-run from scratch on another worker — like a migration, up
// to migration_limit times and outside the retry budget (lifecycle.ts runRouted: ENGINE_GONE;
// test/e2e/migration.test.ts kills an engine under 32 such requests); the client still gets one
// complete answer or a clean error, never a cut one. What it loses is at most max_tokens tokens of
// decoding on the rare failure, and sampling may then give another (whole) answer. A request
// without max_tokens may run to the context length: always collected.
import { notReplayable, type EventTap, type MigrationConfig } from "./migrate.ts";
import type { Leg } from "./plan.ts";

/** A collectable leg long enough for a mid-answer death to cost more than collecting (see above). */
export function worthCollecting(leg: Leg, cfg: MigrationConfig): boolean {
  const min = cfg.collectMinTokens ?? 0;
  const max = leg.maxTokens ?? null;
  return cfg.limit > 0 && (max === null || max >= min) && collectable(leg);
}

/** A non-streamed chat leg herd may run as a stream and assemble (see above). */
export function collectable(leg: Leg): boolean {
  if (leg.endpoint !== "chat" || leg.stream) return false;
  if (notReplayable({ ...leg, stream: true }) !== null) return false;
  try {
    const b = leg.json ?? (JSON.parse(leg.body) as Record<string, unknown>);
    return b.stream_options === undefined || b.stream_options === null;
  } catch {
    return false;
  }
}

/** The same leg as a stream that ends with a usage chunk. */
export function streamedLeg(leg: Leg): Leg {
  // A copy: the leg's parsed body is shared and never mutated (the keys keep their order).
  const b = { ...(leg.json ?? (JSON.parse(leg.body) as Record<string, unknown>)), stream: true, stream_options: { include_usage: true } };
  return { ...leg, body: JSON.stringify(b), json: b, stream: true };
}

/** Longest content kept (far beyond any context window): past it the answer is a failure, not a cut. */
export const MAX_COLLECTED_CHARS = 64 << 20;

/**
 * Reads a chat stream's events into one chat.completion: as parsed objects from the
 * MigratingSource's tap (the collect path: each event parsed once, there, after its rewrite), or
 * as SSE bytes (`push`).
 */
export class ChatAssembler implements EventTap {
  private readonly dec = new TextDecoder();
  private buf = "";
  private id: string | null = null;
  private created: number | null = null;
  private model: string | null = null;
  private role = "assistant";
  private content = "";
  private reasoning = "";
  private deltas = 0;
  private finish: string | null = null;
  private stopReason: unknown = null;
  private usage: Record<string, unknown> | null = null;
  private fingerprint: unknown = null;
  /** The stream carried an error event (the engine's own, or herd's after a failure). */
  error: unknown = null;
  /** More than MAX_COLLECTED_CHARS: the answer cannot be assembled. */
  tooBig = false;

  push(chunk: Uint8Array): void {
    this.buf += this.dec.decode(chunk, { stream: true }).replaceAll("\r\n", "\n");
    let start = 0;
    for (let i = this.buf.indexOf("\n\n"); i >= 0; i = this.buf.indexOf("\n\n", start)) {
      this.raw(this.buf.slice(start, i));
      start = i + 2;
    }
    this.buf = this.buf.slice(start);
    if (this.buf.length + this.content.length + this.reasoning.length > MAX_COLLECTED_CHARS) this.tooBig = true;
  }

  private raw(ev: string): void {
    const m = /^data: ?(.*)$/m.exec(ev);
    if (!m) return;
    const data = m[1]!.trim();
    if (data === "[DONE]") return;
    let o: Record<string, any>;
    try {
      o = JSON.parse(data) as Record<string, any>;
    } catch {
      return;
    }
    this.event(o);
  }

  unreadable(): void {
    this.tooBig = true;
  }

  /** One data event's JSON (a chat.completion.chunk, or an error event). */
  event(o: Record<string, any>): void {
    if (o.error !== undefined) {
      this.error = o.error;
      return;
    }
    this.id ??= typeof o.id === "string" ? o.id : null;
    this.created ??= typeof o.created === "number" ? o.created : null;
    this.model ??= typeof o.model === "string" ? o.model : null;
    if (o.system_fingerprint !== undefined && o.system_fingerprint !== null) this.fingerprint = o.system_fingerprint;
    if (o.usage && typeof o.usage === "object") this.usage = o.usage as Record<string, unknown>;
    const choice = o.choices?.[0];
    if (!choice) return;
    const delta = choice.delta ?? {};
    if (typeof delta.role === "string") this.role = delta.role;
    if (typeof delta.content === "string" && delta.content !== "") {
      this.content += delta.content;
      this.deltas++;
    }
    const reasoning = delta.reasoning_content ?? delta.reasoning;
    if (typeof reasoning === "string") this.reasoning += reasoning;
    if (this.content.length + this.reasoning.length > MAX_COLLECTED_CHARS) this.tooBig = true;
    if (choice.finish_reason !== undefined && choice.finish_reason !== null) {
      this.finish = choice.finish_reason;
      this.stopReason = choice.stop_reason ?? null;
    }
  }

  /** The chat.completion document (vLLM's field set); `created` defaults to `nowS`. */
  result(nowS: number): Record<string, unknown> {
    const usage = this.usage ?? { prompt_tokens: 0, total_tokens: this.deltas, completion_tokens: this.deltas, prompt_tokens_details: null };
    return {
      id: this.id ?? "chatcmpl-herd",
      object: "chat.completion",
      created: this.created ?? nowS,
      model: this.model ?? "",
      choices: [{
        index: 0,
        message: { role: this.role, content: this.content, refusal: null, annotations: null, audio: null, function_call: null, tool_calls: [], reasoning_content: this.reasoning === "" ? null : this.reasoning },
        logprobs: null,
        finish_reason: this.finish ?? "stop",
        stop_reason: this.stopReason,
      }],
      service_tier: null,
      system_fingerprint: this.fingerprint,
      usage,
      prompt_logprobs: null,
      kv_transfer_params: null,
    };
  }
}
