// A minimal incremental scanner over an OpenAI SSE byte stream, so the relay knows three facts
// without holding the stream: when the first token went by (TTFT), whether the stream ended
// properly (`data: [DONE]`, or an upstream error event which is itself an end), and nothing else.
// After the first token only event boundaries and their first bytes are looked at, so the cost
// per chunk stays tiny. Pure: feed it text, read its fields.

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;

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
  private carry = "";
  private readonly decoder = new TextDecoder();

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
    // An event may hold comment or `event:` lines; look at its data lines only.
    for (const line of raw.split("\n")) {
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
      if (this.sawToken) continue;
      try {
        const parsed: unknown = JSON.parse(data);
        if (isObj(parsed) && isObj(parsed.error)) this.sawError = true;
        else if (chunkHasToken(parsed)) this.sawToken = true;
      } catch {
        // Not JSON: relayed as is; it neither starts nor ends anything.
      }
    }
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
