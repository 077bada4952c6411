// Built-in tokenizer for engines configured without a tokenizer directory (the embedded default), so a
// fresh install needs no model files. Deterministic and lossless, with token counts within a few
// percent of Qwen3's on English prose, code and chat (test/tokenizer/builtin-counts.test.ts measures
// it against the real Qwen3 tokenizer), because the default engine claims Qwen3-8B timing.
//
// How: the text is pre-split with Qwen2/3's own pre-tokenizer pattern (tokenizer.json
// `pre_tokenizer`), and Qwen3's BPE turns almost every such piece into one token (measured on this
// repository's code and docs: a word of ≤ 9 letters with its leading space or punctuation, a
// whitespace run, a digit, a short punctuation run). So each piece becomes one id where an id can
// hold it, else a few:
//   - special tokens <|endoftext|> (0), <|im_start|> (1), <|im_end|> (2), matched first;
//   - an ASCII word piece: optional prefix (space or ASCII punctuation) + letters, split at case
//     changes (camelCase → camel|Case); each part lower/Capital/UPPER; a part of 7+ letters that
//     Qwen3 holds as one token (builtin-words.ts) is one id, else chunks of ≤ 6 letters (≤ 5 after
//     a punctuation prefix) — ids count letters in base 26;
//   - whitespace: one id per run of one character (space, \n, \t, \r) up to 256 long;
//   - punctuation runs: 4 printable ASCII bytes per id (base 95), or ≤ 3 of them plus 1–2 newlines;
//   - anything else (digits, non-ASCII text): chunks of 1–3 bytes.
// Every id fits in a u32 (hashers treat token ids as u32) and decode is the exact inverse. The chat
// template is ChatML.

import { LONG_WORDS } from "./builtin-words.ts";
import { ChatTemplate } from "./chat.ts";
import type { ChatMessage, ChatTemplateOptions, DecodeOptions, EncodeOptions, Tokenizer } from "./types.ts";

const SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] as const;
const BASE = 16; // ids below BASE are reserved for special tokens

// ASCII punctuation that may prefix a word (Qwen's `[^\r\n\p{L}\p{N}]?\p{L}+`); index 0 = no prefix.
const PREFIXES = ["", " ", ..."!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"];
const PREFIX_INDEX = new Map(PREFIXES.map((p, i) => [p, i]));
const WS_CHARS = [" ", "\n", "\t", "\r"];
const WS_MAX = 256;
const PRINTABLE = 95; // 0x20..0x7e
const CASES = 3; // lower, Capital, UPPER
const maxChunk = (prefix: number) => (prefix < 2 ? 6 : 5);

/** Σ 26^k for k = 1..n: how many letter strings of length 1..n. */
const letterStrings = (n: number) => {
  let s = 0;
  for (let k = 1, p = 26; k <= n; k++, p *= 26) s += p;
  return s;
};
const WORD_PER_CASE = [0, 0, 0, 0, 0, letterStrings(5), letterStrings(6)];
const wordBlock = (prefix: number) => CASES * WORD_PER_CASE[maxChunk(prefix)]!;

// Regions, in id order.
const R_BYTES = BASE; // 1, 2 or 3 arbitrary bytes
const BYTE_OFF = [0, 0, 256, 256 + 65536] as const;
const R_P4 = R_BYTES + 256 + 65536 + 16777216; // 4 printable ASCII bytes
const R_WS = R_P4 + PRINTABLE ** 4; // whitespace run: char × length
const R_PNL = R_WS + WS_CHARS.length * WS_MAX; // 1–3 printable bytes + 1–2 newlines
const PNL_OFF = [0, 0, PRINTABLE, PRINTABLE + PRINTABLE ** 2] as const;
const PNL_PER_NL = PRINTABLE + PRINTABLE ** 2 + PRINTABLE ** 3;
const R_WORD = R_PNL + 2 * PNL_PER_NL;
const WORD_START: number[] = [];
let wordEnd = R_WORD;
for (let p = 0; p < PREFIXES.length; p++) {
  WORD_START.push(wordEnd);
  wordEnd += wordBlock(p);
}
const R_LONG = wordEnd; // prefix × case × LONG_WORDS index
const LONG_INDEX = new Map(LONG_WORDS.map((w, i) => [w, i]));
export const FALLBACK_VOCAB_SIZE = R_LONG + PREFIXES.length * CASES * LONG_WORDS.length;

const CHATML =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

const SPECIAL_RE = /<\|endoftext\|>|<\|im_start\|>|<\|im_end\|>/g;
// Qwen2/Qwen3 tokenizer.json pre_tokenizer Split pattern (Hugging Face Qwen/Qwen3-8B), with JS flags.
const PIECE_RE = /(?:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+/giu;
const WORD_RE = /^([\x20-\x2f\x3a-\x40\x5b-\x60\x7b-\x7e]?)([A-Za-z]+)$/;
const PART_RE = /[A-Z]+(?![a-z])|[A-Z]?[a-z]+/g; // camelCase, HTTPServer → HTTP|Server
const PUNCT_NL_RE = /^([\x20-\x7e]{1,3})(\n{1,2})$/;

const utf8 = new TextEncoder();
const utf8d = new TextDecoder("utf-8", { fatal: false });
const printable = (b: number | undefined) => b !== undefined && b >= 0x20 && b <= 0x7e;

function encodeBytes(bytes: Uint8Array, out: number[]): void {
  for (let i = 0; i < bytes.length; ) {
    if (printable(bytes[i]) && printable(bytes[i + 1]) && printable(bytes[i + 2]) && printable(bytes[i + 3])) {
      let v = 0;
      for (let k = 0; k < 4; k++) v = v * PRINTABLE + (bytes[i + k]! - 0x20);
      out.push(R_P4 + v);
      i += 4;
      continue;
    }
    const n = Math.min(3, bytes.length - i);
    let v = 0;
    for (let k = 0; k < n; k++) v = v * 256 + bytes[i + k]!;
    out.push(R_BYTES + BYTE_OFF[n]! + v);
    i += n;
  }
}

const caseOf = (s: string) => (s === s.toLowerCase() ? 0 : s.length > 1 && s === s.toUpperCase() ? 2 : 1);

function letterValue(s: string): number {
  let v = 0;
  for (let i = 0; i < s.length; i++) v = v * 26 + (s.charCodeAt(i) - 97);
  return v;
}

/** One word chunk: prefix index, case, 1..maxChunk lower-case letters. */
function wordId(prefix: number, kase: number, lower: string): number {
  const perCase = WORD_PER_CASE[maxChunk(prefix)]!;
  return WORD_START[prefix]! + kase * perCase + letterStrings(lower.length - 1) + letterValue(lower);
}

function encodeWord(prefix: string, letters: string, out: number[]): void {
  let p = PREFIX_INDEX.get(prefix) ?? 0;
  for (const m of letters.matchAll(PART_RE)) {
    const part = m[0];
    const kase = caseOf(part);
    const lower = part.toLowerCase();
    const long = lower.length > 6 ? LONG_INDEX.get(lower) : undefined;
    if (long !== undefined) {
      out.push(R_LONG + (p * CASES + kase) * LONG_WORDS.length + long);
      p = 0;
      continue;
    }
    for (let i = 0; i < lower.length; ) {
      const n = Math.min(maxChunk(p), lower.length - i);
      // A Capital part continues in lower case; an UPPER one stays UPPER (a 1-letter chunk as Capital).
      const k = kase === 1 && i > 0 ? 0 : kase === 2 && n === 1 ? 1 : kase;
      out.push(wordId(p, k, lower.slice(i, i + n)));
      i += n;
      p = 0;
    }
  }
}

function encodeWhitespace(piece: string, out: number[]): boolean {
  if (!/^[ \n\t\r]+$/.test(piece)) return false;
  for (let i = 0; i < piece.length; ) {
    const c = piece[i]!;
    let n = 1;
    while (i + n < piece.length && piece[i + n] === c && n < WS_MAX) n++;
    out.push(R_WS + WS_CHARS.indexOf(c) * WS_MAX + n - 1);
    i += n;
  }
  return true;
}

function encodePiece(piece: string, out: number[]): void {
  const w = WORD_RE.exec(piece);
  if (w) return encodeWord(w[1]!, w[2]!, out);
  if (encodeWhitespace(piece, out)) return;
  const pn = PUNCT_NL_RE.exec(piece);
  if (pn) {
    const s = pn[1]!;
    let v = 0;
    for (let i = 0; i < s.length; i++) v = v * PRINTABLE + (s.charCodeAt(i) - 0x20);
    out.push(R_PNL + (pn[2]!.length - 1) * PNL_PER_NL + PNL_OFF[s.length]! + v);
    return;
  }
  encodeBytes(utf8.encode(piece), out);
}

// Pieces repeat (words, indentation), and a piece's ids never change: memoised, bounded.
const PIECE_CACHE_MAX = 65536;
const pieceCache = new Map<string, number[]>();
function encodePieceCached(piece: string, out: number[]): void {
  let ids = pieceCache.get(piece);
  if (ids === undefined) {
    ids = [];
    encodePiece(piece, ids);
    if (pieceCache.size >= PIECE_CACHE_MAX) pieceCache.clear();
    pieceCache.set(piece, ids);
  }
  for (let i = 0; i < ids.length; i++) out.push(ids[i]!);
}

function encodePlain(text: string, out: number[]): void {
  let last = 0;
  for (const m of text.matchAll(PIECE_RE)) {
    // The pattern covers every character; a gap would only be a lone surrogate's neighbour.
    if (m.index > last) encodeBytes(utf8.encode(text.slice(last, m.index)), out);
    encodePieceCached(m[0], out);
    last = m.index + m[0].length;
  }
  if (last < text.length) encodeBytes(utf8.encode(text.slice(last)), out);
}

function applyCase(lower: string, kase: number): string {
  if (kase === 2) return lower.toUpperCase();
  if (kase === 1) return lower.charAt(0).toUpperCase() + lower.slice(1);
  return lower;
}

function wordText(id: number): string {
  let p = PREFIXES.length - 1;
  while (WORD_START[p]! > id) p--;
  const perCase = WORD_PER_CASE[maxChunk(p)]!;
  const x = id - WORD_START[p]!;
  const kase = Math.floor(x / perCase);
  let v = x % perCase;
  let n = 1;
  for (let size = 26; v >= size; size *= 26) {
    v -= size;
    n++;
  }
  let s = "";
  for (let k = 0; k < n; k++, v = Math.floor(v / 26)) s = String.fromCharCode(97 + (v % 26)) + s;
  return PREFIXES[p]! + applyCase(s, kase);
}

/** The text of a non-special id below FALLBACK_VOCAB_SIZE (bytes ids go to `bytes`). */
function idText(id: number, bytes: number[]): string | null {
  if (id < R_P4) {
    const v = id - R_BYTES;
    const n = v < BYTE_OFF[2] ? 1 : v < BYTE_OFF[3] ? 2 : 3;
    const x = v - BYTE_OFF[n]!;
    for (let k = n - 1; k >= 0; k--) bytes.push(Math.floor(x / 256 ** k) % 256);
    return null;
  }
  if (id < R_WS) {
    const x = id - R_P4;
    let s = "";
    for (let k = 3; k >= 0; k--) s += String.fromCharCode(0x20 + (Math.floor(x / PRINTABLE ** k) % PRINTABLE));
    return s;
  }
  if (id < R_PNL) return WS_CHARS[Math.floor((id - R_WS) / WS_MAX)]!.repeat(((id - R_WS) % WS_MAX) + 1);
  if (id < R_WORD) {
    const x = id - R_PNL;
    const nl = Math.floor(x / PNL_PER_NL) + 1;
    let v = x % PNL_PER_NL;
    const n = v < PNL_OFF[2] ? 1 : v < PNL_OFF[3] ? 2 : 3;
    v -= PNL_OFF[n]!;
    let s = "";
    for (let k = n - 1; k >= 0; k--) s += String.fromCharCode(0x20 + (Math.floor(v / PRINTABLE ** k) % PRINTABLE));
    return s + "\n".repeat(nl);
  }
  if (id < R_LONG) return wordText(id);
  const x = id - R_LONG;
  const word = LONG_WORDS[x % LONG_WORDS.length]!;
  const pk = Math.floor(x / LONG_WORDS.length);
  return PREFIXES[Math.floor(pk / CASES)]! + applyCase(word, pk % CASES);
}

export function createFallbackTokenizer(): Tokenizer {
  const template = new ChatTemplate(CHATML, { eos_token: "<|im_end|>", pad_token: "<|endoftext|>" });
  return {
    name: "builtin",
    vocabSize: FALLBACK_VOCAB_SIZE,
    eosTokenIds: [2, 0],
    encode(text: string, _opts?: EncodeOptions): number[] {
      const out: number[] = [];
      let last = 0;
      for (const m of text.matchAll(SPECIAL_RE)) {
        encodePlain(text.slice(last, m.index), out);
        out.push(SPECIALS.indexOf(m[0] as (typeof SPECIALS)[number]));
        last = m.index + m[0].length;
      }
      encodePlain(text.slice(last), out);
      return out;
    },
    decode(ids: readonly number[], opts?: DecodeOptions): string {
      let text = "";
      let bytes: number[] = [];
      const flush = () => {
        if (bytes.length > 0) text += utf8d.decode(new Uint8Array(bytes));
        bytes = [];
      };
      for (const id of ids) {
        if (id < BASE) {
          flush();
          if (!opts?.skipSpecialTokens) text += SPECIALS[id] ?? "";
        } else if (id < FALLBACK_VOCAB_SIZE) {
          const s = idText(id, bytes);
          if (s !== null) {
            flush();
            text += s;
          }
        }
      }
      flush();
      return text;
    },
    applyChatTemplate: (messages: readonly ChatMessage[], opts: ChatTemplateOptions) => template.render(messages, opts),
    // The id's own text (a byte chunk that splits a character decodes to U+FFFD, like byte-level BPE's pieces).
    idToToken(id: number): string | undefined {
      return Number.isInteger(id) && id >= 0 && id < FALLBACK_VOCAB_SIZE ? this.decode([id]) : undefined;
    },
  };
}
