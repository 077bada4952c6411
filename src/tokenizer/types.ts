// The tokenizer seam shared by the simulated engine and (later) the router. Kept free of engine code so
// the router can hash prompts with exactly the token ids an engine would see.

export interface ChatMessage {
  role: string;
  /** A string, or OpenAI content parts (text parts are joined with "\n", as vLLM does for text-only models). */
  content?: unknown;
  [key: string]: unknown;
}

export interface ChatTemplateOptions {
  addGenerationPrompt: boolean;
  tools?: unknown[];
  /** Extra template variables (vLLM's `chat_template_kwargs`, e.g. `enable_thinking`). */
  extra?: Record<string, unknown>;
}

export interface EncodeOptions {
  /** Add the tokenizer's special tokens (BOS etc.). vLLM: true for completions, false for rendered chat. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  skipSpecialTokens?: boolean;
}

export interface Tokenizer {
  /** "hf:<dir>" or "builtin". */
  readonly name: string;
  readonly vocabSize: number;
  readonly eosTokenIds: readonly number[];
  encode(text: string, opts?: EncodeOptions): number[];
  decode(ids: readonly number[], opts?: DecodeOptions): string;
  applyChatTemplate(messages: readonly ChatMessage[], opts: ChatTemplateOptions): string;
  /**
   * The vocabulary string of one id (transformers' convert_ids_to_tokens, what vLLM's /tokenize
   * returns as token_strs); undefined outside the vocabulary.
   */
  idToToken?(id: number): string | undefined;
}

/** An entry of tokenizer.json's `added_tokens`: matched in raw text before normalisation, encoded as its own id. */
export interface AddedToken {
  id: number;
  content: string;
  lstrip?: boolean;
  rstrip?: boolean;
  single_word?: boolean;
}
