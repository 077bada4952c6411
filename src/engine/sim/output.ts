// Deterministic output text for the simulated engine. A request's output is a walk over a fixed word
// list whose start and stride come from a hash of (seed, prompt tokens): the same prompt gives the same
// output, like greedy decoding. Words are tokenized once with the engine's tokenizer so every output
// token id is real for that tokenizer and decodes to a known text piece.

import type { Tokenizer } from "../../tokenizer/index.ts";

const WORDS = (
  "the model answers with a short and plain sentence about routing tokens across engines, " +
  "while caches keep shared prefixes warm. each request streams text back to the client; " +
  "latency stays low when blocks are reused and batches stay full. a scheduler decides which " +
  "sequence runs next, and the router picks the engine that already holds most of the prompt."
).split(" ");

interface Piece {
  id: number;
  text: string;
}

export class OutputVocabulary {
  /** Per word: its tokens with the text each one adds. */
  private readonly words: Piece[][];
  readonly eosId: number;
  /** The prompt as u32s for the hash (reused: copying each prompt with map() was ~10 % of `herd simulate`). */
  private scratch = new Uint32Array(1024);

  constructor(tok: Tokenizer) {
    this.words = WORDS.map((w) => {
      const ids = tok.encode(" " + w, { addSpecialTokens: false });
      const pieces: Piece[] = [];
      let prev = "";
      for (let i = 0; i < ids.length; i++) {
        const text = tok.decode(ids.slice(0, i + 1), { skipSpecialTokens: true });
        pieces.push({ id: ids[i]!, text: text.slice(prev.length) });
        prev = text;
      }
      return pieces;
    });
    this.eosId = tok.eosTokenIds[0] ?? 0;
  }

  /**
   * An output stream for one request. `naturalLen` is where the model would emit EOS (0 = never).
   * `withText` false: token ids only (`tokenId`), for callers that never read the text (`herd simulate`).
   */
  stream(seed: number, promptTokens: ArrayLike<number>, naturalLen: number, withText = true): OutputStream {
    let h = Bun.hash.xxHash32(this.promptWords(promptTokens), seed >>> 0);
    const start = h % this.words.length;
    h = Math.imul(h ^ (h >>> 16), 0x45d9f3b) >>> 0;
    // An odd stride visits every word before repeating when the list length is even; any stride works.
    const stride = 1 + 2 * (h % 7);
    return new OutputStream(this.words, start, stride, naturalLen, this.eosId, withText);
  }

  /** The prompt's ids as u32 (a Uint32Array store is ToUint32, the same as `x >>> 0`). */
  private promptWords(tokens: ArrayLike<number>): Uint32Array {
    if (tokens instanceof Uint32Array) return tokens;
    const n = tokens.length;
    if (this.scratch.length < n) this.scratch = new Uint32Array(Math.max(n, 2 * this.scratch.length));
    const s = this.scratch;
    if (Array.isArray(tokens)) s.set(tokens);
    else for (let i = 0; i < n; i++) s[i] = tokens[i]!;
    return s.subarray(0, n);
  }
}

export class OutputStream {
  private readonly ids: number[] = [];
  private readonly texts: string[] = [];
  private word: number;

  constructor(
    private readonly words: Piece[][],
    start: number,
    private readonly stride: number,
    private readonly naturalLen: number,
    private readonly eosId: number,
    private readonly withText = true,
  ) {
    this.word = start;
  }

  /** The index-th output token; the EOS token's text is "" (special tokens are skipped in output). */
  token(index: number): { id: number; text: string; eos: boolean } {
    if (!this.withText) throw new Error("OutputStream: created without text (withText false)");
    if (this.isEos(index)) return { id: this.eosId, text: "", eos: true };
    this.fill(index);
    return { id: this.ids[index]!, text: this.texts[index]!, eos: false };
  }

  /** The index-th token's id only (no object, no text). */
  tokenId(index: number): number {
    if (this.isEos(index)) return this.eosId;
    this.fill(index);
    return this.ids[index]!;
  }

  /** Whether the index-th token is the model's EOS. */
  isEos(index: number): boolean {
    return this.naturalLen > 0 && index === this.naturalLen - 1;
  }

  private fill(index: number): void {
    while (this.ids.length <= index) {
      for (const p of this.words[this.word]!) {
        this.ids.push(p.id);
        if (this.withText) this.texts.push(p.text);
      }
      this.word = (this.word + this.stride) % this.words.length;
    }
  }
}

/**
 * Stop strings, applied the way vLLM's detokenizer does: output text ends before the first match
 * (stop_reason = the string), and while streaming the last (longest stop − 1) characters are held back
 * so a stop string split across tokens never leaks to the client.
 */
export class StopMatcher {
  private text = "";
  private emitted = 0;
  private readonly hold: number;

  constructor(private readonly stops: readonly string[]) {
    this.hold = Math.max(0, ...stops.map((s) => s.length - 1));
  }

  /** Append a token's text; returns the text now safe to send and the matched stop string, if any. */
  push(piece: string): { emit: string; stop: string | null } {
    const from = Math.max(0, this.text.length - this.hold);
    this.text += piece;
    let at = -1;
    let which: string | null = null;
    for (const s of this.stops) {
      if (s === "") continue;
      const i = this.text.indexOf(s, from);
      if (i >= 0 && (at < 0 || i < at)) {
        at = i;
        which = s;
      }
    }
    if (which !== null) {
      const emit = this.text.slice(this.emitted, at);
      this.text = this.text.slice(0, at);
      this.emitted = at;
      return { emit, stop: which };
    }
    const safe = Math.max(this.emitted, this.text.length - this.hold);
    const emit = this.text.slice(this.emitted, safe);
    this.emitted = safe;
    return { emit, stop: null };
  }

  /** At the end of a request: whatever was held back. */
  flush(): string {
    const emit = this.text.slice(this.emitted);
    this.emitted = this.text.length;
    return emit;
  }

  get fullText(): string {
    return this.text;
  }
}
