// /v1/responses on an engine that does not serve it: an Upstream around the real one that sends
// the leg as a chat completion to that worker and turns the answer back into the Responses shapes
// (src/protocol/responses.ts: the Response object, or the event stream the openai client reads).
// Decided per attempt from the chosen worker's kind, so a model whose engines differ works, and the
// lifecycle (retries, commit point, relay) runs unchanged: it sees a Responses answer either way.
//
// Native: vLLM (vllm/entrypoints/openai/serving_responses.py) and herd's sim engine. SGLang, TRT-LLM
// and command/external engines are translated (an external vLLM still works: translation is exact
// for text and function calls, it only loses engine-side built-in tools).
import { wallClockMs } from "../core/clock.ts";
import type { EngineKind } from "../config/types.ts";
import { ResponsesEventStream, chatOutput, chatRequest, conversation, finalStatus, responseObject, sseEvent, type ResponseHead } from "../protocol/responses.ts";
import type { ChunkSource, LegReply, LegRequest, ReadResult, StreamFormat, Upstream } from "../request/upstream.ts";

/** Engine kinds whose OpenAI server has POST /v1/responses. */
export const NATIVE_RESPONSES: ReadonlySet<EngineKind> = new Set<EngineKind>(["vllm", "sim"]);

/** The largest chat answer translated whole (a Response is one JSON document). */
const MAX_WHOLE_BYTES = 16 * 1024 * 1024;

const enc = new TextEncoder();

export class ResponsesUpstream implements Upstream<Uint8Array> {
  readonly format: StreamFormat<Uint8Array>;

  constructor(
    private readonly inner: Upstream<Uint8Array>,
    /** The kind of engine a worker runs (undefined: unknown worker → translated). */
    private readonly kindOf: (workerId: string) => EngineKind | undefined,
  ) {
    this.format = inner.format;
  }

  send(leg: LegRequest, signal: AbortSignal, reply: (r: LegReply<Uint8Array> | { error: unknown }) => void): void {
    const kind = this.kindOf(leg.workerId);
    if (leg.endpoint !== "responses" || (kind !== undefined && NATIVE_RESPONSES.has(kind))) return this.inner.send(leg, signal, reply);
    const body = JSON.parse(leg.body) as Record<string, unknown>;
    const model = String(body.model ?? "");
    const chat = chatRequest(body, conversation(body, null), model);
    const head: ResponseHead = { id: `resp_${crypto.randomUUID().replaceAll("-", "")}`, createdAt: Math.floor(wallClockMs() / 1000), model, request: body };
    this.inner.send({ ...leg, endpoint: "chat", body: JSON.stringify(chat) }, signal, (r) => {
      if ("error" in r || r.status !== 200 || r.body === null) return reply(r);
      const body = leg.stream ? streamed(r.body, head) : whole(r.body, head);
      reply({ status: 200, contentType: leg.stream ? "text/event-stream; charset=utf-8" : "application/json", contentLength: null, body });
    });
  }
}

/** A non-streamed chat answer → one Response object (read whole, bounded). */
function whole(src: ChunkSource<Uint8Array>, head: ResponseHead): ChunkSource<Uint8Array> {
  let sent = false;
  return {
    read(cb: (r: ReadResult<Uint8Array>) => void) {
      if (sent) return cb({ done: true });
      const parts: Uint8Array[] = [];
      let size = 0;
      const next = (): void =>
        src.read((r) => {
          if ("error" in r) return cb(r);
          if (!r.done) {
            size += r.value.byteLength;
            if (size > MAX_WHOLE_BYTES) {
              src.cancel();
              return cb({ done: false, error: new Error("chat answer too large to translate") });
            }
            parts.push(r.value.slice());
            return next();
          }
          sent = true;
          let out;
          try {
            out = chatOutput(JSON.parse(new TextDecoder().decode(Buffer.concat(parts))));
          } catch (e) {
            return cb({ done: false, error: e });
          }
          cb({ done: false, value: enc.encode(JSON.stringify(responseObject(head, finalStatus(out), out))) });
        });
      next();
    },
    cancel: () => src.cancel(),
  };
}

/** A chat SSE stream → Responses events; the engine's own error event passes through as it is. */
function streamed(src: ChunkSource<Uint8Array>, head: ResponseHead): ChunkSource<Uint8Array> {
  const events = new ResponsesEventStream(head);
  const decoder = new TextDecoder();
  let carry = "";
  let ended = false;
  const translate = (text: string): string => {
    carry += text.includes("\r") ? text.replace(/\r\n?/g, "\n") : text;
    let out = "";
    for (let end = carry.indexOf("\n\n"); end >= 0; end = carry.indexOf("\n\n")) {
      const raw = carry.slice(0, end);
      carry = carry.slice(end + 2);
      for (const line of raw.split("\n")) {
        if (!line.startsWith("data:") || ended) continue;
        const data = line.slice(5).trim();
        if (data === "[DONE]") {
          ended = true;
          out += events.end().map(sseEvent).join("");
          continue;
        }
        let parsed: unknown;
        try {
          parsed = JSON.parse(data);
        } catch {
          continue;
        }
        if (typeof parsed === "object" && parsed !== null && "error" in parsed) {
          ended = true;
          out += `data: ${data}\n\n`;
          continue;
        }
        out += events.chunk(parsed).map(sseEvent).join("");
      }
    }
    return out;
  };
  return {
    read(cb: (r: ReadResult<Uint8Array>) => void) {
      const next = (): void =>
        src.read((r) => {
          if ("error" in r || r.done) return cb(r);
          const out = translate(decoder.decode(r.value, { stream: true }));
          // An event that never ends is not a chat stream: fail it (the relay sends an error event).
          if (carry.length > MAX_WHOLE_BYTES) {
            src.cancel();
            return cb({ done: false, error: new Error("chat stream event too large to translate") });
          }
          if (out === "") return next();
          cb({ done: false, value: enc.encode(out) });
        });
      next();
    },
    cancel: () => src.cancel(),
  };
}
