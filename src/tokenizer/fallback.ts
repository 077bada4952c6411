// Built-in tokenizer for engines configured without a tokenizer directory (the embedded default), so a
// fresh install needs no model files. Deterministic and lossless, with token counts of the same order as
// a real BPE vocabulary:
//   - the special tokens <|endoftext|> (0), <|im_start|> (1), <|im_end|> (2) are matched in text first;
//   - the rest is pre-split GPT-2 style (optional leading space + letters, digits, punctuation runs,
//     whitespace runs), and each piece is cut greedily into chunks: 4 bytes when all four are printable
//     ASCII (0x20..0x7e), else up to 3 bytes of anything;
//   - a chunk gets id BASE + OFFSET[kind] + its value (big-endian bytes, base 256; base 95 for the
//     printable 4-byte kind), so every id fits in a u32 (hashers treat token ids as u32) and decode is
//     the exact inverse.
// English text averages about 3 bytes per token (a BPE vocabulary about 4). The chat template is ChatML.

import { ChatTemplate } from "./chat.ts";
import type { ChatMessage, ChatTemplateOptions, DecodeOptions, EncodeOptions, Tokenizer } from "./types.ts";

const SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] as const;
const BASE = 16; // ids below BASE are reserved for special tokens
// Id offsets by chunk kind: 1, 2, 3 arbitrary bytes, then 4 printable ASCII bytes.
const OFFSET = [0, 0, 256, 256 + 65536, 256 + 65536 + 16777216] as const;
const PRINTABLE = 95; // 0x20..0x7e
export const FALLBACK_VOCAB_SIZE = BASE + OFFSET[4] + PRINTABLE ** 4;

const CHATML =
  "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endfor %}" +
  "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

const SPECIAL_RE = /<\|endoftext\|>|<\|im_start\|>|<\|im_end\|>/g;
const PIECE_RE = / ?\p{L}+| ?\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

const utf8 = new TextEncoder();
const utf8d = new TextDecoder("utf-8", { fatal: false });

const printable = (b: number | undefined) => b !== undefined && b >= 0x20 && b <= 0x7e;

function encodePiece(bytes: Uint8Array, out: number[]): void {
  for (let i = 0; i < bytes.length; ) {
    if (printable(bytes[i]) && printable(bytes[i + 1]) && printable(bytes[i + 2]) && printable(bytes[i + 3])) {
      let v = 0;
      for (let k = 0; k < 4; k++) v = v * PRINTABLE + (bytes[i + k]! - 0x20);
      out.push(BASE + OFFSET[4] + v);
      i += 4;
      continue;
    }
    const n = Math.min(3, bytes.length - i);
    let v = 0;
    for (let k = 0; k < n; k++) v = v * 256 + bytes[i + k]!;
    out.push(BASE + OFFSET[n]! + v);
    i += n;
  }
}

function encodePlain(text: string, out: number[]): void {
  for (const m of text.matchAll(PIECE_RE)) encodePiece(utf8.encode(m[0]), out);
}

function idBytes(id: number, out: number[]): void {
  const v = id - BASE;
  if (v >= OFFSET[4]) {
    const x = v - OFFSET[4];
    for (let k = 3; k >= 0; k--) out.push(0x20 + (Math.floor(x / PRINTABLE ** k) % PRINTABLE));
    return;
  }
  const n = v < OFFSET[2] ? 1 : v < OFFSET[3] ? 2 : 3;
  const x = v - OFFSET[n]!;
  for (let k = n - 1; k >= 0; k--) out.push(Math.floor(x / 256 ** k) % 256);
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
        } else if (id < FALLBACK_VOCAB_SIZE) idBytes(id, bytes);
      }
      flush();
      return text;
    },
    applyChatTemplate: (messages: readonly ChatMessage[], opts: ChatTemplateOptions) => template.render(messages, opts),
  };
}
