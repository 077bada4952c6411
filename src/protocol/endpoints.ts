// Checks of the non-generation bodies herd routes: embeddings, score, rerank, pooling, tokenize,
// detokenize, in vLLM's request shapes (vllm/entrypoints/openai/protocol.py and the pooling
// protocol: EmbeddingCompletionRequest `input`, ScoreRequest `text_1`/`text_2` or
// `queries`/`documents`|`items`, RerankRequest `query`/`documents`, PoolingRequest `input` or
// `messages`, TokenizeCompletionRequest `prompt` / TokenizeChatRequest `messages`,
// DetokenizeRequest `tokens`). Only what herd relies on is checked (model, size, the fields that
// carry the text); the engine checks the rest as it would without herd. Internal fields are
// stripped as for generation requests.
import { badRequest } from "../core/errors.ts";
import { isInternalKey, isObject, type CheckedRequest, type Endpoint, type RequestLimits } from "./openai.ts";

export type PoolingEndpoint = "embeddings" | "score" | "rerank" | "pooling";
export type TokenEndpoint = "tokenize" | "detokenize";

/** Characters of text in a pooling input (string, list of strings, ids, list of id lists, chat parts). */
function inputChars(v: unknown, param: string, required = true): number {
  if (v === undefined || v === null) {
    if (required) throw badRequest(`'${param}' is required`, param, "missing_required_parameter");
    return 0;
  }
  if (typeof v === "string") return v.length;
  if (typeof v === "number" && Number.isInteger(v)) return 4;
  if (Array.isArray(v)) {
    let n = 0;
    for (let i = 0; i < v.length; i++) n += inputChars(v[i], `${param}[${i}]`);
    return n;
  }
  if (isObject(v)) {
    // vLLM's multimodal score/rerank params ({content: [parts]}) and chat-style parts.
    if (typeof v.text === "string") return v.text.length;
    if (Array.isArray(v.content)) return inputChars(v.content, `${param}.content`, false);
    return 0;
  }
  throw badRequest(`'${param}' must be a string, a list of strings or a list of token ids`, param, "invalid_type");
}

function messagesChars(v: unknown, limits: RequestLimits): number {
  if (!Array.isArray(v) || v.length === 0) throw badRequest("'messages' must be a non-empty array of message objects", "messages", "invalid_type");
  if (v.length > limits.maxMessages) throw badRequest(`'messages' has ${v.length} messages; this server accepts at most ${limits.maxMessages} per request`, "messages", "array_above_max_length");
  let n = 0;
  v.forEach((m, i) => {
    if (!isObject(m) || typeof m.role !== "string") throw badRequest(`'messages[${i}].role' must be a non-empty string`, `messages[${i}].role`, "invalid_type");
    n += inputChars(m.content, `messages[${i}].content`, false);
  });
  return n;
}

/** The text a pooling request carries, by endpoint (400 naming the missing field). */
function poolingChars(endpoint: PoolingEndpoint, b: Record<string, unknown>, limits: RequestLimits): number {
  switch (endpoint) {
    case "embeddings":
      return b.messages !== undefined ? messagesChars(b.messages, limits) : inputChars(b.input, "input");
    case "pooling":
      return b.messages !== undefined ? messagesChars(b.messages, limits) : inputChars(b.input, "input");
    case "rerank":
      return inputChars(b.query, "query") + inputChars(b.documents, "documents");
    case "score": {
      // vLLM accepts text_1/text_2 (older), queries with documents or items (newer), data_1/data_2.
      for (const [a, c] of [["text_1", "text_2"], ["queries", "documents"], ["queries", "items"], ["data_1", "data_2"]] as const)
        if (b[a] !== undefined && b[c] !== undefined) return inputChars(b[a], a) + inputChars(b[c], c);
      throw badRequest("'text_1' and 'text_2' (or 'queries' and 'documents') are required", "text_1", "missing_required_parameter");
    }
  }
}

function strip(body: Record<string, unknown>): { body: Record<string, unknown>; stripped: string[] } {
  const stripped = Object.keys(body).filter(isInternalKey);
  if (stripped.length === 0) return { body, stripped };
  const out = { ...body };
  for (const k of stripped) delete out[k];
  return { body: out, stripped };
}

/**
 * Check an embeddings / score / rerank / pooling / tokenize / detokenize body. `model` may be
 * absent on tokenize and detokenize (vLLM's field is optional): the result's model is then "" and
 * the frontend picks the only model, or answers 400.
 */
export function checkOther(endpoint: PoolingEndpoint | TokenEndpoint, parsed: unknown, limits: RequestLimits): CheckedRequest {
  if (!isObject(parsed)) throw badRequest("request body must be a JSON object", null, "invalid_type");
  const b = parsed;
  const tokenOnly = endpoint === "tokenize" || endpoint === "detokenize";
  if (b.model !== undefined && b.model !== null && (typeof b.model !== "string" || b.model === "")) throw badRequest("'model' must be a non-empty string", "model", "invalid_type");
  if (!tokenOnly && typeof b.model !== "string") throw badRequest("'model' is required and must be a non-empty string", "model", "missing_required_parameter");
  let chars: number;
  if (endpoint === "tokenize") chars = b.messages !== undefined ? messagesChars(b.messages, limits) : inputChars(b.prompt, "prompt");
  else if (endpoint === "detokenize") {
    const t = b.tokens;
    if (!Array.isArray(t) || !t.every((x) => Number.isInteger(x) && x >= 0)) throw badRequest("'tokens' must be a list of token ids", "tokens", "invalid_type");
    chars = t.length * 4;
  } else chars = poolingChars(endpoint, b, limits);
  if (chars > limits.maxPromptChars) throw badRequest(`the input has more than ${limits.maxPromptChars} characters, the most this server accepts per request`, null, "prompt_too_long");
  const s = strip(b);
  return { endpoint: endpoint as Endpoint, model: typeof b.model === "string" ? b.model : "", stream: false, body: s.body, stripped: s.stripped, promptChars: chars };
}
