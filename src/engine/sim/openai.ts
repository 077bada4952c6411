// OpenAI request parsing and vLLM's exact response shapes for the simulated engine. Pure functions:
// body → GenerationRequest (or a 400 HerdError naming the field), and builders for the JSON objects
// vLLM's serving_chat / serving_completion emit (field sets as they appear on the wire).

import { HerdError, badRequest } from "../../core/errors.ts";
import type { ChatMessage, Tokenizer } from "../../tokenizer/index.ts";

export type Endpoint = "chat" | "completion";

export interface GenerationRequest {
  endpoint: Endpoint;
  model: string;
  promptTokens: number[];
  /** null = vLLM's chat default: the rest of the context window (completions default to 16). */
  maxTokens: number | null;
  stop: string[];
  stream: boolean;
  includeUsage: boolean;
  ignoreEos: boolean;
  /** The --lora-modules adapter the request names as its model; null = the base model. */
  lora: string | null;
  /** vLLM's cache_salt (block 0's extra hash key); null when absent. */
  cacheSalt: string | null;
  /** vLLM's `priority` (lower first; refused unless the engine runs --scheduling-policy priority). */
  priority: number;
  /**
   * A chat request with `continue_final_message` whose last message is the assistant's partial
   * answer (herd's request migration, issue 21): the output continues that answer as greedy
   * decoding would — the walk of the prompt without it (`seedTokens`), after the text already given.
   */
  continuation?: { seedTokens: number[]; text: string };
}

/** Completions without max_tokens generate 16 tokens (vLLM's CompletionRequest default, as OpenAI's). */
export const COMPLETION_DEFAULT_MAX_TOKENS = 16;

const isObj = (v: unknown): v is Record<string, unknown> => v !== null && typeof v === "object" && !Array.isArray(v);
const isTokenList = (v: unknown): v is number[] => Array.isArray(v) && v.every((x) => Number.isInteger(x) && x >= 0);

function optInt(body: Record<string, unknown>, key: string, min: number): number | null {
  const v = body[key];
  if (v === undefined || v === null) return null;
  if (!Number.isInteger(v)) throw badRequest(`${key} must be an integer`, key);
  if ((v as number) < min) throw badRequest(`${key} must be at least ${min}, got ${v}.`, key);
  return v as number;
}

function optBool(body: Record<string, unknown>, key: string): boolean {
  const v = body[key];
  if (v === undefined || v === null) return false;
  if (typeof v !== "boolean") throw badRequest(`${key} must be a boolean`, key);
  return v;
}

/**
 * A float field as pydantic (lax mode) validates vLLM's request models: a number, or a string that
 * parses as one; anything else is a 400 naming the field (vLLM answers RequestValidationError 400).
 */
function optFloat(body: Record<string, unknown>, key: string): number | null {
  const v = body[key];
  if (v === undefined || v === null) return null;
  if (typeof v === "number" && Number.isFinite(v)) return v;
  if (typeof v === "string" && v.trim() !== "" && Number.isFinite(Number(v))) return Number(v);
  const shown = typeof v === "string" ? `'${v}'` : JSON.stringify(v);
  throw badRequest(`1 validation error: ${key}: Input should be a valid number, unable to parse ${typeof v} as a number [input_value=${shown}]`, key);
}

/** Sampling fields the sim ignores but, like vLLM (SamplingParams._verify_args), still checks. */
function checkSampling(body: Record<string, unknown>): void {
  const temperature = optFloat(body, "temperature");
  if (temperature !== null && temperature < 0) throw badRequest(`temperature must be non-negative, got ${temperature}.`, "temperature");
  const topP = optFloat(body, "top_p");
  if (topP !== null && !(topP > 0 && topP <= 1)) throw badRequest(`top_p must be in (0, 1], got ${topP}.`, "top_p");
  for (const key of ["presence_penalty", "frequency_penalty"]) {
    const v = optFloat(body, key);
    if (v !== null && !(v >= -2 && v <= 2)) throw badRequest(`${key} must be in [-2, 2], got ${v}.`, key);
  }
  for (const key of ["top_k", "seed"]) {
    const v = body[key];
    if (v !== undefined && v !== null && !Number.isInteger(v)) throw badRequest(`1 validation error: ${key}: Input should be a valid integer [input_value=${JSON.stringify(v)}]`, key);
  }
}

/**
 * Parse a /v1/chat/completions or /v1/completions body. `served` is the engine's model name;
 * `loras` the --lora-modules names (a request naming one runs under that adapter).
 */
export function parseGeneration(endpoint: Endpoint, body: unknown, served: string, tok: Tokenizer, loras: readonly string[] = []): GenerationRequest {
  if (!isObj(body)) throw badRequest("request body must be a JSON object", null);
  const model = body.model === undefined || body.model === null ? served : body.model;
  if (typeof model !== "string") throw badRequest("model must be a string", "model");
  const lora = model !== served && loras.includes(model) ? model : null;
  if (model !== served && lora === null) throw new HerdError(404, "not_found_error", `The model \`${model}\` does not exist.`, "model_not_found", "model");
  const n = optInt(body, "n", 1);
  if (n !== null && n !== 1) throw badRequest("n must be 1: the simulated engine returns one choice per request", "n");
  checkSampling(body);
  // vllm/entrypoints/openai/completion/protocol.py (and chat's): `cache_salt: str | None`,
  // min_length 1, max_length 1024, checked by pydantic before anything runs.
  const salt = body.cache_salt;
  if (salt !== undefined && salt !== null && (typeof salt !== "string" || salt === "" || salt.length > 1024)) {
    throw badRequest("Parameter 'cache_salt' must be a string of 1 to 1024 characters if provided.", "cache_salt");
  }
  const cacheSalt = typeof salt === "string" ? salt : null;
  // vllm/entrypoints/openai protocol: `priority: int = 0` on chat and completion requests.
  const priority = optInt(body, "priority", Number.MIN_SAFE_INTEGER) ?? 0;
  const maxTokens = optInt(body, "max_completion_tokens", 1) ?? optInt(body, "max_tokens", 1) 
    // Absent, not null: an explicit null means "the rest of the context" on both endpoints.
    ?? (endpoint === "completion" && body.max_tokens === undefined ? COMPLETION_DEFAULT_MAX_TOKENS : null);
  const stream = optBool(body, "stream");
  let includeUsage = false;
  if (body.stream_options !== undefined && body.stream_options !== null) {
    if (!isObj(body.stream_options)) throw badRequest("stream_options must be an object", "stream_options");
    if (!stream) throw badRequest("Stream options can only be defined when `stream=True`.", "stream_options");
    includeUsage = optBool(body.stream_options, "include_usage");
  }
  let stop: string[] = [];
  if (typeof body.stop === "string") stop = [body.stop];
  else if (Array.isArray(body.stop) && body.stop.every((s) => typeof s === "string")) stop = body.stop as string[];
  else if (body.stop !== undefined && body.stop !== null) throw badRequest("stop must be a string or a list of strings", "stop");
  const ignoreEos = optBool(body, "ignore_eos");

  const promptTokens = endpoint === "chat"
    ? tok.encode(renderChat(body, tok), { addSpecialTokens: false })
    : parsePrompt(body.prompt, tok);
  const continuation = endpoint === "chat" ? continuationOf(body, tok) : undefined;
  return { endpoint, model, promptTokens, maxTokens, stop, stream, includeUsage, ignoreEos, lora, cacheSalt, priority, ...(continuation ? { continuation } : {}) };
}

/** vLLM's `continue_final_message`: the last (assistant) message is continued, not answered. */
function continuationOf(body: Record<string, unknown>, tok: Tokenizer): GenerationRequest["continuation"] {
  if (body.continue_final_message !== true) return undefined;
  const msgs = body.messages as Record<string, unknown>[];
  const last = msgs.at(-1)!;
  if (last.role !== "assistant" || typeof last.content !== "string") throw badRequest("continue_final_message needs a final assistant message with string content", "messages");
  const seedTokens = tok.encode(renderChat({ ...body, messages: msgs.slice(0, -1), add_generation_prompt: true }, tok), { addSpecialTokens: false });
  return { seedTokens, text: last.content };
}

/** The chat prompt text: messages (+ tools, chat_template_kwargs) through the chat template. */
export function renderChat(body: Record<string, unknown>, tok: Tokenizer): string {
  const msgs = body.messages;
  if (!Array.isArray(msgs) || msgs.length === 0) throw badRequest("messages must be a non-empty list", "messages");
  msgs.forEach((m, i) => {
    if (!isObj(m) || typeof m.role !== "string") throw badRequest(`messages[${i}] must be an object with a string role`, `messages[${i}]`);
  });
  const tools = body.tools === undefined || body.tools === null ? undefined : body.tools;
  if (tools !== undefined && !Array.isArray(tools)) throw badRequest("tools must be a list", "tools");
  const kwargs = isObj(body.chat_template_kwargs) ? body.chat_template_kwargs : undefined;
  const addGenerationPrompt = body.add_generation_prompt === undefined ? true : optBool(body, "add_generation_prompt");
  return tok.applyChatTemplate(msgs as ChatMessage[], {
    addGenerationPrompt,
    ...(tools !== undefined ? { tools } : {}),
    ...(kwargs !== undefined ? { extra: kwargs } : {}),
  });
}

/** A completion prompt: a string or a token-id list, or a one-element list of either. */
export function parsePrompt(prompt: unknown, tok: Tokenizer): number[] {
  let p = prompt;
  if (Array.isArray(p) && p.length === 1 && (typeof p[0] === "string" || Array.isArray(p[0]))) p = p[0];
  if (typeof p === "string") return tok.encode(p, { addSpecialTokens: true });
  if (isTokenList(p) && p.length > 0) {
    const bad = p.find((id) => id >= tok.vocabSize);
    if (bad !== undefined) throw badRequest(`Token id ${bad} is out of vocabulary`, "prompt");
    return p;
  }
  if (Array.isArray(p) && p.length > 1 && p.every((x) => typeof x === "string" || Array.isArray(x))) {
    throw badRequest("only one prompt per request is supported by the simulated engine", "prompt");
  }
  throw badRequest("prompt must be a string or a non-empty list of token ids", "prompt");
}

export interface Usage {
  prompt_tokens: number;
  total_tokens: number;
  completion_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
}

export function usage(prompt: number, completion: number, cached: number): Usage {
  return { prompt_tokens: prompt, total_tokens: prompt + completion, completion_tokens: completion, prompt_tokens_details: { cached_tokens: cached } };
}

export function requestId(endpoint: Endpoint): string {
  const hex = crypto.randomUUID().replaceAll("-", "");
  return endpoint === "chat" ? `chatcmpl-${hex}` : `cmpl-${hex}`;
}

interface Head {
  id: string;
  created: number;
  model: string;
}

/** A streamed chunk. Chat: delta (with role on the first chunk); completion: text. */
export function chunk(ep: Endpoint, h: Head, text: string, opts: { first?: boolean; finish?: string | null; stopReason?: string | null } = {}): unknown {
  const done = opts.finish !== undefined && opts.finish !== null;
  if (ep === "chat") {
    const choice: Record<string, unknown> = {
      index: 0,
      delta: opts.first ? { role: "assistant", content: text } : { content: text },
      logprobs: null,
      finish_reason: done ? opts.finish : null,
    };
    if (done) choice.stop_reason = opts.stopReason ?? null;
    return { id: h.id, object: "chat.completion.chunk", created: h.created, model: h.model, choices: [choice] };
  }
  return {
    id: h.id, object: "text_completion", created: h.created, model: h.model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: done ? opts.finish : null, stop_reason: done ? (opts.stopReason ?? null) : null }],
    usage: null,
  };
}

export function usageChunk(ep: Endpoint, h: Head, u: Usage): unknown {
  return { id: h.id, object: ep === "chat" ? "chat.completion.chunk" : "text_completion", created: h.created, model: h.model, choices: [], usage: u };
}

export function fullResponse(ep: Endpoint, h: Head, text: string, finish: string, stopReason: string | null, u: Usage, kvTransferParams: Record<string, unknown> | null = null): unknown {
  if (ep === "chat") {
    return {
      id: h.id, object: "chat.completion", created: h.created, model: h.model,
      choices: [{
        index: 0,
        message: { role: "assistant", content: text, refusal: null, annotations: null, audio: null, function_call: null, tool_calls: [], reasoning_content: null },
        logprobs: null, finish_reason: finish, stop_reason: stopReason,
      }],
      service_tier: null, system_fingerprint: null, usage: u, prompt_logprobs: null, kv_transfer_params: kvTransferParams,
    };
  }
  return {
    id: h.id, object: "text_completion", created: h.created, model: h.model,
    choices: [{ index: 0, text, logprobs: null, finish_reason: finish, stop_reason: stopReason, prompt_logprobs: null }],
    usage: u, kv_transfer_params: kvTransferParams,
  };
}

const TYPE_BY_STATUS: Record<number, string> = { 400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError", 503: "ServiceUnavailableError" };

/** vLLM's ErrorResponse: {"error": {message, type, param, code}} with the HTTP status as code. */
export function errorBody(status: number, message: string, param: string | null = null): unknown {
  return { error: { message, type: TYPE_BY_STATUS[status] ?? "BadRequestError", param, code: status } };
}
