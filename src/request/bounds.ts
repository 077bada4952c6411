// How long a non-streaming request may wait for its answer. A non-streaming engine answer (vLLM,
// SGLang: one JSON document) arrives only once generation is over, so its headers come after the
// whole decode, not after the first token: first_token_timeout_ms alone would abort every long
// generation. The bound until the response headers is therefore the first-token allowance plus a
// per-token allowance for the tokens the request may generate; after the headers the body must
// follow within idle_timeout_ms (the engine has finished generating by then).
//
// The per-token allowance is a floor of 10 tokens/s per sequence — well below what a healthy
// engine decodes even in a full batch — so only a hung (or pathologically swamped) engine trips it.
// No new config key: the bound is derived from the existing frontend timeouts and the request's
// own max_tokens, so it scales with what the client asked for.

/** Allowance per requested token for a non-streaming answer (a 10 tokens/s floor). */
export const NON_STREAM_MS_PER_TOKEN = 100;
/** Tokens assumed when the request names no max_tokens (the engine's default is "up to the context"). */
export const NON_STREAM_DEFAULT_MAX_TOKENS = 8192;
/** Cap on the tokens counted, so an absurd max_tokens cannot make the bound unbounded in practice. */
export const NON_STREAM_MAX_COUNTED_TOKENS = 131_072;

/** The request's generation limit: max_completion_tokens (chat) or max_tokens, null when absent. */
export function requestedMaxTokens(body: Record<string, unknown>): number | null {
  for (const key of ["max_completion_tokens", "max_tokens"]) {
    const v = body[key];
    if (typeof v === "number" && Number.isFinite(v) && v >= 1) return Math.floor(v);
  }
  return null;
}

/**
 * Milliseconds a non-streaming request may wait for the response headers:
 * first_token_timeout_ms + min(max_tokens ?? 8192, 131072) × 100 ms.
 */
export function nonStreamingHeadersBoundMs(firstTokenTimeoutMs: number, maxTokens: number | null): number {
  const tokens = Math.min(maxTokens ?? NON_STREAM_DEFAULT_MAX_TOKENS, NON_STREAM_MAX_COUNTED_TOKENS);
  return firstTokenTimeoutMs + tokens * NON_STREAM_MS_PER_TOKEN;
}
