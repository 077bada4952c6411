// Validation of OpenAI request bodies before routing: a pure function from parsed JSON to a checked
// request, or a 400 HerdError naming the offending field. Only the fields herd itself relies on (or
// that would make an engine misbehave) are checked; everything else passes through to the engine,
// which validates the rest exactly as it would without herd.
//
// Internal fields are STRIPPED, not refused: herd alone decides where a request goes and what
// disaggregation metadata it carries (llm-d's SSRF via x-prefiller-host-port, docs/references.md#reliability-2, mitigation 5),
// and ordinary clients that forward unknown extra_body keys keep working. Request-supplied chat
// templates are stripped too (PYSEC-2026-4349: template render DoS).
import { badRequest } from "../core/errors.ts";

/** Generation endpoints (checked here) and the others herd routes (checked in endpoints.ts, responses.ts). */
export const ENDPOINTS = ["chat", "completions", "responses", "embeddings", "score", "rerank", "pooling", "tokenize", "detokenize"] as const;
export type Endpoint = (typeof ENDPOINTS)[number];
export const isEndpoint = (s: string | null): s is Endpoint => s !== null && (ENDPOINTS as readonly string[]).includes(s);

export interface CheckedRequest {
  endpoint: Endpoint;
  model: string;
  stream: boolean;
  /** The body to forward: the original object, minus stripped fields. */
  body: Record<string, unknown>;
  /** Top-level keys removed from the client's body (for a debug log line). */
  stripped: string[];
  /** Characters of prompt text, for a rough token estimate (chars / 4) until tokenization lands. */
  promptChars: number;
}

/** Keys only herd may set (disaggregation metadata, target hosts) or that a client must not control. */
const INTERNAL_KEYS = new Set([
  "kv_transfer_params",
  "bootstrap_host",
  "bootstrap_port",
  "bootstrap_room",
  "disagg_prefill_req",
  "chat_template",
]);
// Anything naming a network target at the top level of a request body (prefill_host, target_url,
// decode_addr, worker_endpoint…). No OpenAI field has these words at the top level.
const TARGET_KEY = /(^|_)(host|hosts|url|urls|addr|address|endpoint|port|ports)$/;

export function isInternalKey(key: string): boolean {
  return INTERNAL_KEYS.has(key) || TARGET_KEY.test(key);
}

export const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

function optionalInt(body: Record<string, unknown>, key: string, min: number, max = Number.MAX_SAFE_INTEGER): void {
  const v = body[key];
  if (v === undefined || v === null) return;
  if (typeof v !== "number" || !Number.isInteger(v)) throw badRequest(`'${key}' must be an integer`, key, "invalid_type");
  if (v < min || v > max) throw badRequest(`'${key}' must be between ${min} and ${max}, got ${v}`, key);
}

function optionalNumber(body: Record<string, unknown>, key: string, min: number, max: number): void {
  const v = body[key];
  if (v === undefined || v === null) return;
  if (typeof v !== "number" || !Number.isFinite(v)) throw badRequest(`'${key}' must be a number`, key, "invalid_type");
  if (v < min || v > max) throw badRequest(`'${key}' must be between ${min} and ${max}, got ${v}`, key);
}

function textChars(content: unknown): number {
  if (typeof content === "string") return content.length;
  if (Array.isArray(content)) {
    let n = 0;
    for (const part of content) if (isObject(part) && typeof part.text === "string") n += part.text.length;
    return n;
  }
  return 0;
}

/**
 * Per-request work bounds (config `frontend.max_messages`, `frontend.max_prompt_chars`): template
 * rendering, tokenization and hashing all grow with them, so a request above either is a 400 before
 * any of that runs. Checked with O(1) work per message and stopped at the first excess.
 */
export interface RequestLimits {
  maxMessages: number;
  maxPromptChars: number;
}

export const NO_LIMITS: RequestLimits = { maxMessages: Infinity, maxPromptChars: Infinity };

const tooManyMessages = (n: number, max: number) =>
  badRequest(`'messages' has ${n} messages; this server accepts at most ${max} per request`, "messages", "array_above_max_length");

function checkChars(chars: number, limits: RequestLimits, param: string): void {
  if (chars > limits.maxPromptChars)
    throw badRequest(`the prompt has more than ${limits.maxPromptChars} characters, the most this server accepts per request`, param, "prompt_too_long");
}

function checkMessages(messages: unknown, limits: RequestLimits): number {
  if (!Array.isArray(messages)) throw badRequest("'messages' must be an array of message objects", "messages", "invalid_type");
  if (messages.length === 0) throw badRequest("'messages' must contain at least one message", "messages");
  if (messages.length > limits.maxMessages) throw tooManyMessages(messages.length, limits.maxMessages);
  let chars = 0;
  for (let i = 0; i < messages.length; i++) {
    const m = messages[i];
    if (!isObject(m)) throw badRequest(`'messages[${i}]' must be an object`, `messages[${i}]`, "invalid_type");
    if (typeof m.role !== "string" || m.role === "")
      throw badRequest(`'messages[${i}].role' must be a non-empty string`, `messages[${i}].role`, "invalid_type");
    const c = m.content;
    if (c !== undefined && c !== null && typeof c !== "string" && !Array.isArray(c))
      throw badRequest(`'messages[${i}].content' must be a string, an array of parts or null`, `messages[${i}].content`, "invalid_type");
    chars += textChars(c);
    checkChars(chars, limits, "messages");
  }
  return chars;
}

function checkPrompt(prompt: unknown, limits: RequestLimits): number {
  const n = checkPromptShape(prompt);
  checkChars(n, limits, "prompt");
  return n;
}

function checkPromptShape(prompt: unknown): number {
  if (prompt === undefined || prompt === null) throw badRequest("'prompt' is required", "prompt", "missing_required_parameter");
  if (typeof prompt === "string") return prompt.length;
  const isTokenList = (v: unknown) => Array.isArray(v) && v.every((t) => typeof t === "number" && Number.isInteger(t) && t >= 0);
  if (Array.isArray(prompt) && prompt.length > 0) {
    if (prompt.every((p) => typeof p === "string")) return (prompt as string[]).reduce((n, p) => n + p.length, 0);
    // Token ids: count each id as ~4 characters so the estimate stays in tokens.
    if (isTokenList(prompt)) return prompt.length * 4;
    if (prompt.every(isTokenList)) return (prompt as number[][]).reduce((n, p) => n + p.length * 4, 0);
  }
  throw badRequest("'prompt' must be a string, a list of strings, a list of token ids or a list of token-id lists", "prompt", "invalid_type");
}

/** Validate a parsed body for `endpoint`; throws a 400 HerdError naming the field. */
export function checkRequest(endpoint: "chat" | "completions", parsed: unknown, limits: RequestLimits = NO_LIMITS): CheckedRequest {
  if (!isObject(parsed)) throw badRequest("request body must be a JSON object", null, "invalid_type");
  const body = parsed;
  if (typeof body.model !== "string" || body.model === "")
    throw badRequest("'model' is required and must be a non-empty string", "model", body.model === undefined ? "missing_required_parameter" : "invalid_type");
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== "boolean")
    throw badRequest("'stream' must be a boolean", "stream", "invalid_type");
  if (body.stream_options !== undefined && body.stream_options !== null && !isObject(body.stream_options))
    throw badRequest("'stream_options' must be an object", "stream_options", "invalid_type");
  optionalInt(body, "max_tokens", 1);
  optionalInt(body, "max_completion_tokens", 1);
  optionalInt(body, "n", 1, 128);
  optionalNumber(body, "temperature", 0, 2);
  optionalNumber(body, "top_p", 0, 1);
  const promptChars = endpoint === "chat" ? checkMessages(body.messages, limits) : checkPrompt(body.prompt, limits);

  const stripped: string[] = [];
  for (const key of Object.keys(body)) if (isInternalKey(key)) stripped.push(key);
  let out = body;
  if (stripped.length > 0) {
    out = { ...body };
    for (const key of stripped) delete out[key];
  }
  return { endpoint, model: body.model, stream: body.stream === true, body: out, stripped, promptChars };
}
