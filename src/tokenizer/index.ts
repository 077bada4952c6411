// Entry point: loadTokenizer(dir) gives a HuggingFace tokenizer from a directory, or the built-in
// fallback when dir is null/empty. Loaded tokenizers are cached per directory (they are immutable and
// a tokenizer.json can take ~100 ms and tens of MB to load).

import { createFallbackTokenizer } from "./fallback.ts";
import { loadHfTokenizer } from "./hf.ts";
import type { Tokenizer } from "./types.ts";

export type { AddedToken, ChatMessage, ChatTemplateOptions, DecodeOptions, EncodeOptions, Tokenizer } from "./types.ts";
export { loadAddedTokens as loadHfAddedTokens, loadChatTemplate, noChatTemplate } from "./hf.ts";
export { createFallbackTokenizer, FALLBACK_VOCAB_SIZE } from "./fallback.ts";

const cache = new Map<string, Promise<Tokenizer>>();

export function loadTokenizer(dir: string | null): Promise<Tokenizer> {
  const key = dir === null || dir === "" ? "" : dir;
  let p = cache.get(key);
  if (p === undefined) {
    p = key === "" ? Promise.resolve(createFallbackTokenizer()) : loadHfTokenizer(key);
    // A failed load is not cached, so a fixed directory can be retried.
    p.catch(() => cache.delete(key));
    cache.set(key, p);
  }
  return p;
}
