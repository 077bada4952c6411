// A minimal incremental scanner over an OpenAI SSE byte stream, so the relay knows four facts
// without holding the stream: when the first token went by (TTFT), whether the stream ended
// properly (`data: [DONE]`, or an upstream error event which is itself an end), and the cached
// prompt tokens the engine reported in its usage chunk (for the index-staleness metrics).
// After the first token only event boundaries, their first bytes and a substring test for
// `"cached_tokens"` are looked at, so the cost per chunk stays tiny. Pure: feed it text, read its fields.

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;

// A JSON key with an unescaped closing quote cannot occur inside a JSON string value (there every
// quote is `\"`), so this matches only the real usage field, never generated text that mentions it.
const CACHED_TOKENS = /"cached_tokens"\s*:\s*(\d+)/g;
const RESPONSES_END = /"type"\s*:\s*"(response\.(?:completed|incomplete|failed))"/;
const COMPLETION_TOKENS = /"completion_tokens"\s*:\s*(\d+)/g;

/** The last `usage.completion_tokens` in a piece of JSON text, or null (same reasoning as cached_tokens). */
export function lastCompletionTokens(text: string): number | null {
  let out: number | null = null;
  if (!text.includes('"completion_tokens"')) return null;
  COMPLETION_TOKENS.lastIndex = 0;
  for (let m = COMPLETION_TOKENS.exec(text); m !== null; m = COMPLETION_TOKENS.exec(text)) out = Number(m[1]);
  return out;
}

/** The last `usage.prompt_tokens_details.cached_tokens` in a piece of JSON text, or null. */
export function lastCachedTokens(text: string): number | null {
  let out: number | null = null;
  if (!text.includes('"cached_tokens"')) return null;
  CACHED_TOKENS.lastIndex = 0;
  for (let m = CACHED_TOKENS.exec(text); m !== null; m = CACHED_TOKENS.exec(text)) out = Number(m[1]);
  return out;
}

/**
 * The cached tokens of a non-streaming JSON answer, fed chunk by chunk as it passes: only a short
 * tail is kept across chunks (a match may straddle two), never the body. The bytes are searched
 * natively for the two keys (Buffer.lastIndexOf) and only a few bytes after a hit are decoded: a
 * non-streamed answer is otherwise never turned into text by herd (was: a UTF-8 decode of the whole
 * body and two regex passes over it, per request). The keys and digits are ASCII, and no byte of a
 * multi-byte UTF-8 sequence is ASCII, so reading the hit's neighbourhood as latin1 finds exactly
 * what the text would; JSON's whitespace (RFC 8259 §2) is matched, not every Unicode space.
 */
export class UsageTail {
  cachedTokens: number | null = null;
  /** usage.completion_tokens of the answer, null when absent. */
  outputTokens: number | null = null;
  private carry: Buffer | null = null;

  push(bytes: Uint8Array): void {
    const b = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    // A match straddling the previous chunk and this one: the seam is searched first, so a match
    // wholly in this chunk (later in the body) wins.
    if (this.carry !== null) this.scan(Buffer.concat([this.carry, b.subarray(0, TAIL_BYTES)]));
    this.scan(b);
    // Long enough for `"completion_tokens" : 1234567890` with some whitespace; a match wholly inside
    // it is found again next time with the same value, which is harmless.
    this.carry = b.length >= TAIL_BYTES || this.carry === null ? Buffer.from(b.subarray(-TAIL_BYTES)) : Buffer.concat([this.carry, b]).subarray(-TAIL_BYTES);
  }

  private scan(b: Buffer): void {
    const cached = lastNumberAfter(b, CACHED_KEY);
    if (cached !== null) this.cachedTokens = cached;
    const output = lastNumberAfter(b, COMPLETION_KEY);
    if (output !== null) this.outputTokens = output;
  }
}

const TAIL_BYTES = 96;
const CACHED_KEY = Buffer.from('"cached_tokens"');
const COMPLETION_KEY = Buffer.from('"completion_tokens"');
const KEY_VALUE = /^"[a-z_]+"[ \t\r\n]*:[ \t\r\n]*(\d+)/;

/** The number after the last `"key" :` in `b` that has one (as lastCachedTokens on the text), or null. */
function lastNumberAfter(b: Buffer, key: Buffer): number | null {
  for (let i = b.lastIndexOf(key); i >= 0; i = i === 0 ? -1 : b.lastIndexOf(key, i - 1)) {
    // A short window first; the rest of the buffer only when the window may have cut the match
    // (no match in it, or its digits run to its end).
    const cut = i + 64 < b.length;
    const win = b.toString("latin1", i, cut ? i + 64 : b.length);
    let m = KEY_VALUE.exec(win);
    if (cut && (m === null || m[0].length === win.length)) m = KEY_VALUE.exec(b.toString("latin1", i));
    if (m) return Number(m[1]);
  }
  return null;
}

/** True when a parsed chunk carries generated output (text, content, reasoning, tool call) or a finish. */
export function chunkHasToken(data: unknown): boolean {
  if (!isObj(data) || !Array.isArray(data.choices)) return false;
  for (const c of data.choices) {
    if (!isObj(c)) continue;
    if (typeof c.text === "string" && c.text !== "") return true;
    if (c.finish_reason !== undefined && c.finish_reason !== null) return true;
    const d = c.delta;
    if (isObj(d)) {
      if (typeof d.content === "string" && d.content !== "") return true;
      if (typeof d.reasoning_content === "string" && d.reasoning_content !== "") return true;
      if (Array.isArray(d.tool_calls) && d.tool_calls.length > 0) return true;
    }
  }
  return false;
}

export class SseScanner {
  /** A chunk with a token (or a finish) has been seen. */
  sawToken = false;
  /** `data: [DONE]` was seen: the upstream ended the stream properly. */
  sawDone = false;
  /** The upstream sent its own error event (vLLM's create_streaming_error_response). */
  sawError = false;
  /** usage.prompt_tokens_details.cached_tokens of the last usage chunk seen (include_usage), else null. */
  cachedTokens: number | null = null;
  /** Data events from the first token on: one per token for vLLM and SGLang's default stream interval. */
  private tokenEvents = 0;
  private completionTokens: number | null = null;
  private carry = "";
  private readonly decoder = new TextDecoder();

  /** Output tokens: usage.completion_tokens when the worker reported it, else the token events seen; null before the first. */
  get outputTokens(): number | null {
    return this.completionTokens ?? (this.tokenEvents > 0 ? this.tokenEvents : null);
  }

  /** Feed raw bytes; returns true if this chunk completed the first token event. */
  push(bytes: Uint8Array): boolean {
    const before = this.sawToken;
    let text = this.carry + this.decoder.decode(bytes, { stream: true });
    // SSE allows CRLF line ends; normalise so one separator ("\n\n") finds every event boundary.
    if (text.includes("\r")) text = text.replace(/\r\n?/g, "\n");
    let start = 0;
    for (;;) {
      const end = text.indexOf("\n\n", start);
      if (end < 0) break;
      this.event(text.slice(start, end));
      start = end + 2;
    }
    // Keep only the unfinished event; bounded because an over-long one is dropped (it is opaque
    // output we relay anyway, and an event that big cannot be a marker we look for).
    this.carry = text.length - start > 65_536 ? "" : text.slice(start);
    return !before && this.sawToken;
  }

  private event(raw: string): void {
    // An event may hold comment or `event:` lines. Responses API streams (POST /v1/responses) name
    // each event (`event: response.output_text.delta`) and end with response.completed (or
    // .incomplete / .failed / error) instead of `[DONE]` (vLLM serving_responses.py, OpenAI's).
    for (const line of raw.split("\n")) {
      if (line.startsWith("event:")) {
        this.namedEvent(line.slice(6).trim());
        continue;
      }
      if (!line.startsWith("data:")) continue;
      const data = line.slice(line.charCodeAt(5) === 32 ? 6 : 5);
      if (data === "[DONE]") {
        this.sawDone = true;
        continue;
      }
      if (data.startsWith('{"error"')) {
        this.sawError = true;
        continue;
      }
      const cached = lastCachedTokens(data);
      if (cached !== null) this.cachedTokens = cached;
      const completion = lastCompletionTokens(data);
      if (completion !== null) this.completionTokens = completion;
      // A Responses stream without `event:` lines still ends with its type in the data. An unescaped
      // `"type":"response.` cannot occur inside a JSON string value, so generated text never matches.
      const end = data.includes("\"response.") ? RESPONSES_END.exec(data) : null;
      if (end) this.namedEvent(end[1]!);
      if (this.sawToken) {
        // A usage-only chunk (include_usage) is not a token.
        if (completion === null) this.tokenEvents++;
        continue;
      }
      try {
        const parsed: unknown = JSON.parse(data);
        if (isObj(parsed) && isObj(parsed.error)) this.sawError = true;
        else if (chunkHasToken(parsed)) {
          this.sawToken = true;
          this.tokenEvents++;
        } else if (isObj(parsed) && typeof parsed.type === "string") this.namedEvent(parsed.type);
      } catch {
        // Not JSON: relayed as is; it neither starts nor ends anything.
      }
    }
  }

  private namedEvent(type: string): void {
    if (type === "response.output_text.delta" || type === "response.output_item.done" || type === "response.reasoning_text.delta") this.sawToken = true;
    else if (type === "response.completed" || type === "response.incomplete" || type === "response.failed") this.sawToken = this.sawDone = true;
    else if (type === "error") this.sawError = true;
  }

  /** The stream ended properly (so an EOF now is a normal close). */
  get ended(): boolean {
    return this.sawDone || this.sawError;
  }
}

/** An OpenAI-shaped SSE error event, the way vLLM reports a failure inside a stream. */
export function sseErrorEvent(message: string, code: string, type = "server_error"): Uint8Array {
  const body = { error: { message, type, param: null, code } };
  return new TextEncoder().encode(`data: ${JSON.stringify(body)}\n\n`);
}
