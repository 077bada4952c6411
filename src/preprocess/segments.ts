// Splitting text the way a HuggingFace tokenizer does before anything else: on its added tokens
// (`added_tokens` in tokenizer.json, special or not), leftmost-longest. Each added token becomes
// its own id; the text between them is normalised, pre-tokenised and encoded independently, so
// encoding the pieces separately and concatenating gives the same ids as encoding the whole text —
// which is what lets the preprocessor memoise per piece. lstrip/rstrip/single_word are emulated in
// the pattern; a self-check at load (`verifySplitter`) compares piece-wise with whole-text encoding
// on probes and the caller turns memoisation off for a tokenizer where they disagree.
import { type AddedToken, type Tokenizer, loadHfAddedTokens } from "../tokenizer/index.ts";

export type { AddedToken } from "../tokenizer/index.ts";

/** A piece of text between added tokens, or an added token's id. */
export type Piece = string | number;

/** The special tokens of the built-in fallback tokenizer (src/tokenizer/fallback.ts). */
const BUILTIN_ADDED = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];
/** More added tokens than this → one big alternation would be slow; memoisation is turned off. */
const MAX_ADDED_TOKENS = 4096;

/** Added tokens of a tokenizer: from `dir/tokenizer.json`, or the built-in's when dir is empty. */
export async function loadAddedTokens(dir: string, tok: Tokenizer): Promise<AddedToken[]> {
  if (dir === "") {
    const out: AddedToken[] = [];
    for (const content of BUILTIN_ADDED) {
      const ids = tok.encode(content, { addSpecialTokens: false });
      if (ids.length === 1) out.push({ id: ids[0]!, content });
    }
    return out;
  }
  return loadHfAddedTokens(dir);
}

const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&");

export class Splitter {
  private readonly re: RegExp | null;
  private readonly idOf = new Map<string, number>();

  constructor(tokens: readonly AddedToken[]) {
    // Longest first: a JS alternation takes the first alternative that matches at a position, so
    // this order makes the scan leftmost-longest like the tokenizers' Aho-Corasick matcher.
    const sorted = [...tokens].sort((a, b) => b.content.length - a.content.length);
    const alts: string[] = [];
    for (const t of sorted) {
      this.idOf.set(t.content, t.id);
      let p = `(?:${escapeRe(t.content)})`;
      if (t.single_word) p = `(?<![\\p{L}\\p{N}_])${p}(?![\\p{L}\\p{N}_])`;
      alts.push(`${t.lstrip ? "\\s*" : ""}${p}${t.rstrip ? "\\s*" : ""}`);
    }
    // Without the `u` flag unless \p{…} classes need it: a `u` regex over a freshly built (rope)
    // string costs ~0.4 ms per 128 KiB in JSC, the plain one ~0.02 ms; literals match the same.
    const flags = tokens.some((t) => t.single_word) ? "gu" : "g";
    this.re = alts.length > 0 && alts.length <= MAX_ADDED_TOKENS ? new RegExp(alts.join("|"), flags) : null;
  }

  /** Whether the tokenizer has added tokens to split on (else a text is one piece). */
  get active(): boolean {
    return this.re !== null;
  }

  /** Pieces of `text`; with `maxPieces`, null as soon as there would be more (bounded work on the event loop). */
  split(text: string): Piece[];
  split(text: string, maxPieces: number): Piece[] | null;
  split(text: string, maxPieces = Infinity): Piece[] | null {
    const out: Piece[] = [];
    if (this.re === null) {
      if (text !== "") out.push(text);
      return out;
    }
    let last = 0;
    this.re.lastIndex = 0;
    for (let m = this.re.exec(text); m !== null; m = this.re.exec(text)) {
      if (m[0] === "") {
        this.re.lastIndex++;
        continue;
      }
      if (m.index > last) out.push(text.slice(last, m.index));
      out.push(this.idOf.get(m[0].trim()) ?? this.idOf.get(m[0])!);
      last = m.index + m[0].length;
      if (out.length > maxPieces) return null;
    }
    if (last < text.length) out.push(text.slice(last));
    return out;
  }
}

/** Piece-wise encoding of `text`, uncached: the reference the caches must reproduce. */
export function encodePieces(tok: Tokenizer, pieces: readonly Piece[]): number[] {
  const out: number[] = [];
  for (const p of pieces) {
    if (typeof p === "number") out.push(p);
    else for (const id of tok.encode(p, { addSpecialTokens: false })) out.push(id);
  }
  return out;
}

/**
 * Does piece-wise encoding equal whole-text encoding for this tokenizer? Probes put every added
 * token (up to 64) between words, spaces and newlines, back to back, and at both ends.
 */
export function verifySplitter(tok: Tokenizer, splitter: Splitter, tokens: readonly AddedToken[]): boolean {
  const probes = ["Hello world.\n\n  Indented line\tand tab, déjà vu 123456"];
  for (const t of tokens.slice(0, 64)) {
    const c = t.content;
    probes.push(`${c}user\nHi there${c}\n${c}${c} x ${c}  y\n\n${c}`, ` a${c}b `, `${c}`);
  }
  for (const p of probes) {
    const whole = tok.encode(p, { addSpecialTokens: false });
    const pieces = encodePieces(tok, splitter.split(p));
    if (whole.length !== pieces.length || whole.some((id, i) => id !== pieces[i])) return false;
  }
  return true;
}

/**
 * The ids a tokenizer adds around a text with addSpecialTokens (BOS, EOS, CLS …), found by
 * encoding probes both ways; null when they are not a fixed prefix and suffix.
 */
export function specialAffixes(tok: Tokenizer): { prefix: number[]; suffix: number[] } | null {
  const probe = (s: string) => {
    const plain = tok.encode(s, { addSpecialTokens: false });
    const full = tok.encode(s, { addSpecialTokens: true });
    for (let at = 0; at + plain.length <= full.length; at++) {
      if (plain.every((id, i) => full[at + i] === id)) return { prefix: full.slice(0, at), suffix: full.slice(at + plain.length) };
    }
    return null;
  };
  const a = probe("Hello world, how are you?");
  const b = probe("12 + 34 = x\nok");
  if (!a || !b || a.prefix.join() !== b.prefix.join() || a.suffix.join() !== b.suffix.join()) return null;
  return a;
}
