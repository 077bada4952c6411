// POST /tokenize and /detokenize answered by herd itself when it holds the model's own tokenizer
// (models[].tokenizer is a directory) and knows its context window (models[].max_model_len > 0):
// no engine round trip, same answer as vLLM's serving_tokenization.py (TokenizeResponse {count,
// max_model_len, tokens, token_strs}, DetokenizeResponse {prompt}). Chat form: the chat template
// with add_generation_prompt (default true), then encoded with add_special_tokens (default false);
// prompt form: encoded with add_special_tokens (default true). Otherwise (built-in fallback
// tokenizer, unknown context window, `return_token_strs`) the request is forwarded to an engine.
import type { ModelConfig } from "../config/types.ts";
import type { PromptInput } from "../preprocess/index.ts";

/** What herd needs of a model's tokenizer (src/preprocess ModelPreprocessor). */
export interface LocalTokenizer {
  render(input: PromptInput): string;
  encode(text: string, addSpecialTokens: boolean): Promise<number[]>;
  decode(ids: number[]): Promise<string>;
}

/** Finds the tokenizer of a model (the daemon's SharedPreprocessor.local). */
export interface LocalTokenizers {
  local(model: string): Promise<LocalTokenizer | null>;
}

/** The JSON answer herd gives itself, or null when the request must go to an engine. */
export async function answerLocally(
  tokenizers: LocalTokenizers | undefined,
  endpoint: "tokenize" | "detokenize",
  model: ModelConfig | undefined,
  body: Record<string, unknown>,
): Promise<Record<string, unknown> | null> {
  if (!tokenizers || !model || model.tokenizer === "") return null;
  if (endpoint === "detokenize") {
    const tok = await tokenizers.local(model.name);
    return tok ? { prompt: await tok.decode(body.tokens as number[]) } : null;
  }
  if (model.max_model_len <= 0 || body.return_token_strs === true || typeof body.chat_template === "string") return null;
  const tok = await tokenizers.local(model.name);
  if (!tok) return null;
  let tokens: number[];
  if (body.messages !== undefined) {
    const text = tok.render(body as PromptInput);
    tokens = await tok.encode(text, body.add_special_tokens === true);
  } else if (typeof body.prompt === "string") tokens = await tok.encode(body.prompt, body.add_special_tokens !== false);
  else return null;
  return { count: tokens.length, max_model_len: model.max_model_len, tokens, token_strs: null };
}
