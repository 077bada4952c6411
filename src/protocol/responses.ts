// The OpenAI Responses API (POST /v1/responses) as herd and the sim engine speak it: the request
// check, the request as chat messages (for the prompt hashed for routing, and for engines that do not
// serve it natively), and a chat answer turned back into a Response object or its stream of events.
// Shapes and event types as vLLM emits them (vllm/entrypoints/openai/protocol.py ResponsesRequest /
// ResponsesResponse, serving_responses.py: response.created → response.in_progress →
// output_item.added → content_part.added → output_text.delta* → output_text.done →
// content_part.done → output_item.done → response.completed, each with a sequence_number), which
// are OpenAI's (openai-openapi: ResponseStreamEvent). Pure: parsed JSON in, parsed JSON out.
import { badRequest } from "../core/errors.ts";
import { isObject, isInternalKey, type CheckedRequest, type RequestLimits } from "./openai.ts";

/** A chat message as the chat template and /v1/chat/completions take it. */
export interface ChatMsg {
  role: string;
  content: string | null;
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  tool_call_id?: string;
}

/** A stored turn of a conversation: what `previous_response_id` stands for. */
export interface StoredTurn {
  /** The conversation up to and including the previous response's output, as chat messages. */
  messages: ChatMsg[];
}

function partsText(content: unknown, param: string): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) throw badRequest(`'${param}' must be a string or an array of content parts`, param, "invalid_type");
  let out = "";
  content.forEach((p, i) => {
    if (!isObject(p)) throw badRequest(`'${param}[${i}]' must be an object`, `${param}[${i}]`, "invalid_type");
    // input_text / output_text / refusal parts carry text; images and files are the engine's to refuse.
    if (typeof p.text === "string") out += p.text;
    else if (typeof p.refusal === "string") out += p.refusal;
  });
  return out;
}

/** The `input` of a Responses request (string, or a list of items) as chat messages. */
export function inputMessages(input: unknown): ChatMsg[] {
  if (typeof input === "string") return [{ role: "user", content: input }];
  if (!Array.isArray(input)) throw badRequest("'input' must be a string or an array of input items", "input", "invalid_type");
  const out: ChatMsg[] = [];
  input.forEach((item, i) => {
    const param = `input[${i}]`;
    if (!isObject(item)) throw badRequest(`'${param}' must be an object`, param, "invalid_type");
    const type = item.type ?? "message";
    if (type === "message") {
      if (typeof item.role !== "string" || item.role === "") throw badRequest(`'${param}.role' must be a non-empty string`, `${param}.role`, "invalid_type");
      // The chat templates know system, not developer (OpenAI's newer name for it).
      out.push({ role: item.role === "developer" ? "system" : item.role, content: partsText(item.content, `${param}.content`) });
    } else if (type === "function_call") {
      const call = { id: String(item.call_id ?? item.id ?? `call_${i}`), type: "function" as const, function: { name: String(item.name ?? ""), arguments: String(item.arguments ?? "") } };
      const last = out[out.length - 1];
      if (last?.role === "assistant" && last.tool_calls) last.tool_calls.push(call);
      else out.push({ role: "assistant", content: null, tool_calls: [call] });
    } else if (type === "function_call_output") {
      out.push({ role: "tool", tool_call_id: String(item.call_id ?? ""), content: typeof item.output === "string" ? item.output : JSON.stringify(item.output ?? "") });
    } else if (type === "reasoning") {
      // Reasoning items are the model's own; the chat form has no place for them.
    } else throw badRequest(`input item type '${String(type)}' is not supported`, `${param}.type`);
  });
  return out;
}

/** Total characters of the text in chat messages (the frontend's size bound and estimate). */
export function messagesChars(messages: readonly ChatMsg[]): number {
  let n = 0;
  for (const m of messages) n += (m.content ?? "").length;
  return n;
}

/** Check a /v1/responses body: the fields herd relies on, 400 naming the field. */
export function checkResponses(parsed: unknown, limits: RequestLimits): CheckedRequest {
  if (!isObject(parsed)) throw badRequest("request body must be a JSON object", null, "invalid_type");
  const body = parsed;
  if (typeof body.model !== "string" || body.model === "")
    throw badRequest("'model' is required and must be a non-empty string", "model", body.model === undefined ? "missing_required_parameter" : "invalid_type");
  if (body.input === undefined || body.input === null) throw badRequest("'input' is required", "input", "missing_required_parameter");
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean") throw badRequest("'stream' must be a boolean", "stream", "invalid_type");
  if (body.instructions !== undefined && body.instructions !== null && typeof body.instructions !== "string")
    throw badRequest("'instructions' must be a string", "instructions", "invalid_type");
  if (body.previous_response_id !== undefined && body.previous_response_id !== null && typeof body.previous_response_id !== "string")
    throw badRequest("'previous_response_id' must be a string", "previous_response_id", "invalid_type");
  const mot = body.max_output_tokens;
  if (mot !== undefined && mot !== null && (!Number.isInteger(mot) || (mot as number) < 1))
    throw badRequest("'max_output_tokens' must be a positive integer", "max_output_tokens", "invalid_type");
  const messages = inputMessages(body.input);
  if (messages.length > limits.maxMessages) throw badRequest(`'input' has ${messages.length} items; this server accepts at most ${limits.maxMessages}`, "input", "array_above_max_length");
  const chars = messagesChars(messages) + (typeof body.instructions === "string" ? body.instructions.length : 0);
  if (chars > limits.maxPromptChars) throw badRequest(`the prompt has more than ${limits.maxPromptChars} characters, the most this server accepts per request`, "input", "prompt_too_long");
  const stripped = Object.keys(body).filter(isInternalKey);
  let out = body;
  if (stripped.length > 0) {
    out = { ...body };
    for (const k of stripped) delete out[k];
  }
  return { endpoint: "responses", model: body.model, stream: body.stream === true, body: out, stripped, promptChars: chars };
}

/** The whole conversation a Responses request stands for: a stored history, instructions, its input. */
export function conversation(body: Record<string, unknown>, previous: StoredTurn | null): ChatMsg[] {
  const msgs: ChatMsg[] = [];
  // OpenAI: instructions of a previous response are not carried over; this request's come first.
  if (typeof body.instructions === "string" && body.instructions !== "") msgs.push({ role: "system", content: body.instructions });
  if (previous) for (const m of previous.messages) if (m.role !== "system") msgs.push(m);
  msgs.push(...inputMessages(body.input));
  return msgs;
}

/** Responses `tools` (flat function definitions) as chat tools; built-in tools are dropped. */
export function chatTools(tools: unknown): unknown[] | undefined {
  if (!Array.isArray(tools)) return undefined;
  const out = tools
    .filter((t) => isObject(t) && t.type === "function")
    .map((t) => {
      const f = t as Record<string, unknown>;
      return { type: "function", function: { name: f.name, ...(f.description !== undefined ? { description: f.description } : {}), parameters: f.parameters ?? {} } };
    });
  return out.length > 0 ? out : undefined;
}

/** The chat-completions request that serves a Responses request on an engine without /v1/responses. */
export function chatRequest(body: Record<string, unknown>, messages: ChatMsg[], model: string): Record<string, unknown> {
  const out: Record<string, unknown> = { model, messages, stream: body.stream === true };
  if (body.stream === true) out.stream_options = { include_usage: true };
  if (typeof body.max_output_tokens === "number") out.max_tokens = body.max_output_tokens;
  for (const k of ["temperature", "top_p", "user", "seed", "top_k", "cache_salt"]) if (body[k] !== undefined && body[k] !== null) out[k] = body[k];
  const tools = chatTools(body.tools);
  if (tools) {
    out.tools = tools;
    const tc = body.tool_choice;
    if (typeof tc === "string") out.tool_choice = tc;
    else if (isObject(tc) && tc.type === "function") out.tool_choice = { type: "function", function: { name: tc.name } };
  }
  return out;
}

/** What a finished response produced, for the Response object and the conversation store. */
export interface ResponseOutput {
  text: string;
  toolCalls: { id: string; name: string; arguments: string }[];
  /** Chat finish_reason ("stop", "length", "tool_calls"). */
  finish: string | null;
  usage: { input: number; output: number; cached: number } | null;
}

export interface ResponseHead {
  id: string;
  createdAt: number;
  model: string;
  /** The request body (echoed fields: instructions, max_output_tokens, tools, …). */
  request: Record<string, unknown>;
}

function usageObject(u: ResponseOutput["usage"]): Record<string, unknown> | null {
  if (!u) return null;
  return {
    input_tokens: u.input,
    input_tokens_details: { cached_tokens: u.cached },
    output_tokens: u.output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: u.input + u.output,
  };
}

const messageItem = (id: string, text: string, status: string) => ({
  id, type: "message", role: "assistant", status, content: status === "in_progress" ? [] : [{ type: "output_text", text, annotations: [], logprobs: [] }],
});

/** The Response object (OpenAI's `response` resource; vLLM's ResponsesResponse field set). */
export function responseObject(h: ResponseHead, status: "in_progress" | "completed" | "incomplete", out: ResponseOutput | null): Record<string, unknown> {
  const r = h.request;
  const output: unknown[] = [];
  if (out) {
    if (out.text !== "" || out.toolCalls.length === 0) output.push(messageItem(msgId(h.id), out.text, "completed"));
    for (const c of out.toolCalls) output.push({ id: `fc_${c.id}`, type: "function_call", call_id: c.id, name: c.name, arguments: c.arguments, status: "completed" });
  }
  return {
    id: h.id,
    object: "response",
    created_at: h.createdAt,
    status,
    background: false,
    error: null,
    incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    max_tool_calls: r.max_tool_calls ?? null,
    metadata: r.metadata ?? null,
    model: h.model,
    output,
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    previous_response_id: r.previous_response_id ?? null,
    reasoning: r.reasoning ?? null,
    service_tier: r.service_tier ?? "auto",
    store: r.store ?? true,
    temperature: r.temperature ?? 1,
    text: r.text ?? { format: { type: "text" } },
    tool_choice: r.tool_choice ?? "auto",
    tools: Array.isArray(r.tools) ? r.tools : [],
    top_logprobs: r.top_logprobs ?? 0,
    top_p: r.top_p ?? 1,
    truncation: r.truncation ?? "disabled",
    usage: status === "in_progress" ? null : usageObject(out?.usage ?? null),
    user: r.user ?? null,
  };
}

const msgId = (respId: string) => `msg_${respId.replace(/^resp_/, "")}`;

/** A finished chat completion (JSON) as what the response produced. */
export function chatOutput(chat: unknown): ResponseOutput {
  const c = isObject(chat) && Array.isArray(chat.choices) && isObject(chat.choices[0]) ? chat.choices[0] : {};
  const m = isObject(c.message) ? c.message : {};
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
  const u = isObject(chat) && isObject(chat.usage) ? chat.usage : null;
  return {
    text: typeof m.content === "string" ? m.content : "",
    toolCalls: calls.filter(isObject).map((t) => {
      const f = isObject(t.function) ? t.function : {};
      return { id: String(t.id ?? ""), name: String(f.name ?? ""), arguments: String(f.arguments ?? "") };
    }),
    finish: typeof c.finish_reason === "string" ? c.finish_reason : null,
    usage: usageOf(u),
  };
}

function usageOf(u: Record<string, unknown> | null): ResponseOutput["usage"] {
  if (!u) return null;
  const d = isObject(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  return { input: Number(u.prompt_tokens ?? 0), output: Number(u.completion_tokens ?? 0), cached: Number(d.cached_tokens ?? 0) };
}

/** The conversation after a response: its messages plus the assistant's answer (for the store). */
export function turnAfter(messages: ChatMsg[], out: ResponseOutput): StoredTurn {
  const answer: ChatMsg = { role: "assistant", content: out.text };
  if (out.toolCalls.length > 0) answer.tool_calls = out.toolCalls.map((c) => ({ id: c.id, type: "function", function: { name: c.name, arguments: c.arguments } }));
  return { messages: [...messages, answer] };
}

/** The status a finished output gives the response (length-capped → incomplete, as OpenAI). */
export const finalStatus = (out: ResponseOutput) => (out.finish === "length" ? "incomplete" : "completed");

/**
 * Chat-completion stream chunks (parsed) → Responses stream events (objects with `type` and
 * `sequence_number`), in vLLM's order. Text output only is streamed as deltas; tool calls arrive
 * whole in the final output items. One instance per stream.
 */
export class ResponsesEventStream {
  private seq = 0;
  private started = false;
  private text = "";
  private readonly calls = new Map<number, { id: string; name: string; arguments: string }>();
  private finish: string | null = null;
  private usage: ResponseOutput["usage"] = null;
  private readonly item: string;

  constructor(private readonly h: ResponseHead) {
    this.item = msgId(h.id);
  }

  private ev(type: string, fields: Record<string, unknown>): Record<string, unknown> {
    return { type, sequence_number: this.seq++, ...fields };
  }

  /** The events that open the stream (sent before the first chunk's). */
  start(): Record<string, unknown>[] {
    if (this.started) return [];
    this.started = true;
    const resp = responseObject(this.h, "in_progress", null);
    return [
      this.ev("response.created", { response: resp }),
      this.ev("response.in_progress", { response: resp }),
      this.ev("response.output_item.added", { output_index: 0, item: messageItem(this.item, "", "in_progress") }),
      this.ev("response.content_part.added", { item_id: this.item, output_index: 0, content_index: 0, part: { type: "output_text", text: "", annotations: [], logprobs: [] } }),
    ];
  }

  /** One parsed chat chunk. */
  chunk(c: unknown): Record<string, unknown>[] {
    const out = this.start();
    if (!isObject(c)) return out;
    if (isObject(c.usage)) this.usage = usageOf(c.usage);
    const choice = Array.isArray(c.choices) && isObject(c.choices[0]) ? c.choices[0] : null;
    if (!choice) return out;
    if (typeof choice.finish_reason === "string") this.finish = choice.finish_reason;
    const d = isObject(choice.delta) ? choice.delta : {};
    if (typeof d.content === "string" && d.content !== "") {
      this.text += d.content;
      out.push(this.ev("response.output_text.delta", { item_id: this.item, output_index: 0, content_index: 0, delta: d.content, logprobs: [] }));
    }
    if (Array.isArray(d.tool_calls)) {
      for (const t of d.tool_calls) {
        if (!isObject(t)) continue;
        const k = Number(t.index ?? 0);
        const f = isObject(t.function) ? t.function : {};
        const cur = this.calls.get(k) ?? { id: "", name: "", arguments: "" };
        if (typeof t.id === "string") cur.id = t.id;
        if (typeof f.name === "string") cur.name += f.name;
        if (typeof f.arguments === "string") cur.arguments += f.arguments;
        this.calls.set(k, cur);
      }
    }
    return out;
  }

  /** What the stream produced so far. */
  output(): ResponseOutput {
    return { text: this.text, toolCalls: [...this.calls.values()], finish: this.finish, usage: this.usage };
  }

  /** The closing events, the last being response.completed (or .incomplete) with the whole response. */
  end(): Record<string, unknown>[] {
    const out = this.start();
    const o = this.output();
    const part = { type: "output_text", text: o.text, annotations: [], logprobs: [] };
    out.push(this.ev("response.output_text.done", { item_id: this.item, output_index: 0, content_index: 0, text: o.text, logprobs: [] }));
    out.push(this.ev("response.content_part.done", { item_id: this.item, output_index: 0, content_index: 0, part }));
    out.push(this.ev("response.output_item.done", { output_index: 0, item: messageItem(this.item, o.text, "completed") }));
    o.toolCalls.forEach((c, i) => {
      const item = { id: `fc_${c.id}`, type: "function_call", call_id: c.id, name: c.name, arguments: c.arguments, status: "completed" };
      out.push(this.ev("response.output_item.added", { output_index: i + 1, item: { ...item, status: "in_progress" } }));
      out.push(this.ev("response.function_call_arguments.done", { item_id: item.id, output_index: i + 1, arguments: c.arguments }));
      out.push(this.ev("response.output_item.done", { output_index: i + 1, item }));
    });
    const status = finalStatus(o);
    out.push(this.ev(status === "incomplete" ? "response.incomplete" : "response.completed", { response: responseObject(this.h, status, o) }));
    return out;
  }
}

/** An event on the wire as vLLM writes it: `event: <type>` then its JSON (no `[DONE]` afterwards). */
export function sseEvent(e: Record<string, unknown>): string {
  return `event: ${String(e.type)}\ndata: ${JSON.stringify(e)}\n\n`;
}

/** Event types that end a Responses stream. */
export const RESPONSES_END_EVENTS: ReadonlySet<string> = new Set(["response.completed", "response.incomplete", "response.failed", "error"]);
