// Prompt text made of words, so a prompt's length in tokens is controlled by its length in words.
// Every word below is 1 token with a leading space in the Qwen3 vocabulary *and* in herd's built-in
// fallback tokenizer (1–3 letters + space ≤ 4 printable bytes = one fallback chunk), checked by
// test/bench/words.test.ts. So TOKENS_PER_WORD = 1.0: a text of n words encodes to n tokens (±1 at the
// first word of a message); chat templates add their own few tokens per message on top.

import type { Rng } from "../core/rng.ts";

export const TOKENS_PER_WORD = 1.0;

// prettier-ignore
export const WORDS: readonly string[] = [
  "the", "and", "for", "are", "but", "not", "you", "all", "any", "can", "had", "her", "was", "one", "our", "out", "day", "get",
  "has", "him", "his", "how", "man", "new", "now", "old", "see", "two", "way", "who", "boy", "did", "its", "let", "put", "say",
  "she", "too", "use", "act", "add", "age", "ago", "aid", "aim", "air", "art", "ask", "bad", "bag", "bar", "bed", "big", "bit",
  "box", "bus", "buy", "car", "cat", "cow", "cry", "cup", "cut", "dog", "dry", "due", "ear", "eat", "egg", "end", "eye", "far",
  "fat", "few", "fit", "fix", "fly", "fun", "gas", "god", "gun", "guy", "hat", "hit", "hot", "ice", "ill", "job", "joy", "key",
  "kid", "lab", "lay", "leg", "lie", "lot", "low", "map", "mix", "mom", "net", "nor", "oil", "pay", "pen", "pet", "pie", "pot",
  "raw", "red", "rid", "row", "run", "sad", "sea", "set", "sit", "six", "sky", "son", "sun", "tax", "tea", "ten", "tie", "tip",
  "toe", "top", "toy", "try", "van", "war", "wet", "win", "yes", "yet", "arm", "bay", "bee", "bow", "cap", "cab", "dot", "fan",
  "fee", "fog", "fox", "gap", "gym", "hay", "hen", "hip", "hut", "ink", "jam", "jar", "jaw", "kit", "lap", "law", "lid", "lip",
  "log", "mad", "mud", "nap", "nut", "oak", "odd", "owl", "pad", "pan", "paw", "pig", "pin", "pit", "rat", "rib", "rod", "rub",
  "rug", "saw", "sip", "sob", "tab", "tag", "tap", "tin", "tub", "wax", "web", "wig", "zip", "via", "per", "pro", "sum", "rim",
  "era", "ego", "fur", "gum", "ham", "hug", "inn", "lad", "mat", "mop", "nod", "orb", "pea", "peg", "pod", "pun", "ram", "ray",
  "rot", "sac", "sin", "sow", "spy", "tan", "tar", "ton", "vet", "vow", "wit", "yak", "zoo", "an", "as", "at", "be", "by",
  "do", "go", "he", "if", "in", "is", "it", "me", "my", "no", "of", "on", "or", "so", "to", "up", "us", "we", "am", "ok",
];

/** `n` words drawn from `rng`, space-separated (≈ n tokens). */
export function words(rng: Rng, n: number): string {
  const out = new Array<string>(Math.max(0, Math.floor(n)));
  for (let i = 0; i < out.length; i++) out[i] = WORDS[rng.int(WORDS.length)]!;
  return out.join(" ");
}

/** Words needed for about `tokens` tokens. */
export function wordsFor(tokens: number): number {
  return Math.max(0, Math.round(tokens / TOKENS_PER_WORD));
}
