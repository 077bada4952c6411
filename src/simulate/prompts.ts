// BenchRequest → the exact prompt token ids a simulated engine would see, plus the block hashes
// herd's router would compute for it. Rendering is the sim engine's own (renderChat / parsePrompt in
// src/engine/sim/openai.ts), so the engine's prefix cache and herd's index see the same blocks.
//
// Speed: a simulated hour is tens of thousands of prompts of thousands of tokens, mostly shared
// prefixes. Like src/preprocess, the rendered text is split on the tokenizer's added tokens (each piece
// then encodes independently) and each piece's ids are memoised in a byte-bounded LRU; the split is
// checked against whole-text encoding at load (verifySplitter) and memoisation is off when it differs.
import { blockHashes } from "../kv/hash.ts";
import { ByteLru } from "../preprocess/lru.ts";
import { Splitter, loadAddedTokens, specialAffixes, verifySplitter } from "../preprocess/segments.ts";
import { parsePrompt, renderChat } from "../engine/sim/openai.ts";
import { loadTokenizer, type Tokenizer } from "../tokenizer/index.ts";
import type { BenchRequest } from "../bench/workloads.ts";

export interface EncodedPrompt {
  tokens: number[];
  /** Herd's sequence hashes of the full blocks (src/kv hash.ts), what the router routes on. */
  blockHashes: bigint[];
}

export class PromptEncoder {
  private readonly memo: ByteLru<bigint, Uint32Array>;

  private constructor(
    readonly tokenizer: Tokenizer,
    private readonly splitter: Splitter | null,
    private readonly affixes: { prefix: number[]; suffix: number[] } | null,
    readonly blockSize: number,
    memoBytes: number,
  ) {
    this.memo = new ByteLru(memoBytes);
  }

  /** dir null/"" = the built-in fallback tokenizer (what sim engines use without --tokenizer). */
  static async load(dir: string | null, blockSize: number, memoBytes = 128 * 2 ** 20): Promise<PromptEncoder> {
    const tok = await loadTokenizer(dir);
    const added = await loadAddedTokens(dir ?? "", tok);
    const splitter = new Splitter(added);
    const ok = splitter.active && verifySplitter(tok, splitter, added);
    return new PromptEncoder(tok, ok ? splitter : null, specialAffixes(tok), blockSize, memoBytes);
  }

  encode(r: BenchRequest): EncodedPrompt {
    const tokens = r.messages !== undefined ? this.chatTokens(r) : this.completionTokens(r.prompt ?? "");
    return { tokens, blockHashes: blockHashes(tokens, this.blockSize) };
  }

  private chatTokens(r: BenchRequest): number[] {
    const text = renderChat({ messages: r.messages }, this.tokenizer);
    return this.pieces(text, false);
  }

  private completionTokens(prompt: string): number[] {
    // parsePrompt is the sim engine's own path (special tokens added); memoised only with fixed affixes.
    if (this.affixes === null || this.splitter === null) return parsePrompt(prompt, this.tokenizer);
    return [...this.affixes.prefix, ...this.pieces(prompt, true), ...this.affixes.suffix];
  }

  private pieces(text: string, completion: boolean): number[] {
    if (this.splitter === null) return this.tokenizer.encode(text, { addSpecialTokens: completion });
    const parts: (number | Uint32Array)[] = [];
    let total = 0;
    for (const p of this.splitter.split(text)) {
      if (typeof p === "number") {
        parts.push(p);
        total++;
        continue;
      }
      const key = Bun.hash.xxHash3(p);
      let ids = this.memo.get(key);
      if (ids === undefined) {
        ids = Uint32Array.from(this.tokenizer.encode(p, { addSpecialTokens: false }));
        this.memo.set(key, ids, ids.byteLength + 96);
      }
      parts.push(ids);
      total += ids.length;
    }
    // One preallocated array (pushing thousands of ids one by one dominated the profile).
    const out = new Array<number>(total);
    let at = 0;
    for (const p of parts) {
      if (typeof p === "number") out[at++] = p;
      else for (let i = 0; i < p.length; i++) out[at++] = p[i]!;
    }
    return out;
  }
}
