// POST /v1/responses on the sim engine, as vLLM serves it (serving_responses.py): the request's
// instructions + input become the chat prompt, generation runs through the same scheduler as chat,
// and the answer is a Response object or vLLM's event stream (`event: <type>` + `data: <json>`,
// ending with response.completed, no `[DONE]`). The shapes live in src/protocol/responses.ts.
// Like vLLM without VLLM_ENABLE_RESPONSES_API_STORE, nothing is stored: a previous_response_id is
// a 404 here (herd expands it from its own store before a request reaches an engine).
import { wallClockMs } from "../../core/clock.ts";
import { HerdError, badRequest } from "../../core/errors.ts";
import { ResponsesEventStream, chatOutput, chatRequest, conversation, finalStatus, responseObject, sseEvent, type ResponseHead } from "../../protocol/responses.ts";

const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);

/** The chat body a Responses body runs as, and the head of its answer. */
export function responsesAsChat(raw: unknown, served: string): { chat: Record<string, unknown>; head: ResponseHead; stream: boolean } {
  if (!isObj(raw)) throw badRequest("request body must be a JSON object", null);
  if (typeof raw.previous_response_id === "string")
    throw new HerdError(404, "invalid_request_error", `Response with id '${raw.previous_response_id}' not found.`, "response_not_found", "previous_response_id");
  if (raw.input === undefined || raw.input === null) throw badRequest("input is required", "input");
  const model = typeof raw.model === "string" ? raw.model : served;
  const chat = chatRequest(raw, conversation(raw, null), model);
  const head: ResponseHead = { id: `resp_${crypto.randomUUID().replaceAll("-", "")}`, createdAt: Math.floor(wallClockMs() / 1000), model, request: raw };
  return { chat, head, stream: raw.stream === true };
}

const enc = new TextEncoder();

/** A chat answer of the sim (SSE or JSON Response) as the Responses answer. */
export async function asResponses(chatAnswer: Response, head: ResponseHead, stream: boolean): Promise<Response> {
  if (chatAnswer.status !== 200 || chatAnswer.body === null) return chatAnswer;
  if (!stream) {
    const out = chatOutput(await chatAnswer.json());
    return Response.json(responseObject(head, finalStatus(out), out));
  }
  const events = new ResponsesEventStream(head);
  const decoder = new TextDecoder();
  let carry = "";
  const body = chatAnswer.body.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      start(ctrl) {
        ctrl.enqueue(enc.encode(events.start().map(sseEvent).join("")));
      },
      transform(bytes, ctrl) {
        carry += decoder.decode(bytes, { stream: true });
        let out = "";
        for (let end = carry.indexOf("\n\n"); end >= 0; end = carry.indexOf("\n\n")) {
          const data = carry.slice(0, end).replace(/^data: ?/, "");
          carry = carry.slice(end + 2);
          if (data === "[DONE]") out += events.end().map(sseEvent).join("");
          else {
            const parsed = JSON.parse(data) as unknown;
            // vLLM's Responses stream reports a failure as an `error` event.
            if (isObj(parsed) && isObj(parsed.error)) out += sseEvent({ type: "error", sequence_number: 0, code: parsed.error.code ?? null, message: parsed.error.message ?? "", param: null });
            else out += events.chunk(parsed).map(sseEvent).join("");
          }
        }
        if (out !== "") ctrl.enqueue(enc.encode(out));
      },
    }),
  );
  return new Response(body, { status: 200, headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" } });
}
