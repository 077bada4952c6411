// BenchRequest → the exact prompt token ids a simulated engine would see, plus the block hashes
// herd's router would compute for it. Rendering is the sim engine's own (renderChat / parsePrompt in
// src/engine/sim/openai.ts), so the engine's prefix cache and herd's index see the same blocks.
//
// Speed: a simulated hour is tens of thousands of prompts of thousands of tokens, mostly shared
// prefixes. Like src/preprocess, the rendered text is split on the tokenizer's added tokens (each piece
// then encodes independently) and each piece's ids are memoised (gen-cache.ts, byte-bounded); the split is
// checked against whole-text encoding at load (verifySplitter) and memoisation is off when it differs.
// Block hashes are chained along the pieces with src/preprocess's chain memo, as the router's
// preprocessor does, so a shared prefix (a document, a system prompt) is hashed once.
import { blockHashes } from "../kv/hash.ts";
import { GenCache } from "./gen-cache.ts";
import { type ChainState, childKey, collect, extend, rootState, stateBytes } from "../preprocess/chain.ts";
import { type Piece, Splitter, loadAddedTokens, specialAffixes, verifySplitter } from "../preprocess/segments.ts";
import { parsePrompt, renderChat } from "../engine/sim/openai.ts";
import { loadTokenizer, type Tokenizer } from "../tokenizer/index.ts";
import type { BenchRequest } from "../workload/workloads.ts";

const SPECIAL_TAG = 0x5350_4543_0000_0000n;

export interface EncodedPrompt {
  /** Token ids, compact (half a number[]'s bytes, built by memcpy-like set()s from the piece memo). */
  tokens: Uint32Array;
  /** Herd's sequence hashes of the full blocks (src/kv hash.ts), what the router routes on. */
  blockHashes: bigint[];
}

export class PromptEncoder {
  private readonly memo: GenCache<bigint, Uint32Array>;
  /** Hash-chain state after each piece sequence (preprocess/chain.ts): a shared prefix is hashed once. */
  private readonly chains: GenCache<bigint, ChainState>;
  private readonly root: ChainState;

  private constructor(
    readonly tokenizer: Tokenizer,
    private readonly splitter: Splitter | null,
    private readonly affixes: { prefix: number[]; suffix: number[] } | null,
    readonly blockSize: number,
    memoBytes: number,
  ) {
    this.memo = new GenCache(memoBytes);
    this.chains = new GenCache(memoBytes / 2);
    this.root = rootState(blockSize, undefined);
  }

  /** dir null/"" = the built-in fallback tokenizer (what sim engines use without --tokenizer). */
  static async load(dir: string | null, blockSize: number, memoBytes = 64 * 2 ** 20): Promise<PromptEncoder> {
    const tok = await loadTokenizer(dir);
    const added = await loadAddedTokens(dir ?? "", tok);
    const splitter = new Splitter(added);
    const ok = splitter.active && verifySplitter(tok, splitter, added);
    return new PromptEncoder(tok, ok ? splitter : null, specialAffixes(tok), blockSize, memoBytes);
  }

  encode(r: BenchRequest): EncodedPrompt {
    if (this.splitter === null) {
      const tokens = r.messages !== undefined
        ? this.tokenizer.encode(renderChat({ messages: r.messages }, this.tokenizer), { addSpecialTokens: false })
        : parsePrompt(r.prompt ?? "", this.tokenizer);
      return { tokens: Uint32Array.from(tokens), blockHashes: blockHashes(tokens, this.blockSize) };
    }
    let pieces: Piece[];
    if (r.messages !== undefined) pieces = this.splitter.split(renderChat({ messages: r.messages }, this.tokenizer));
    else if (this.affixes !== null) pieces = [...this.affixes.prefix, ...this.splitter.split(r.prompt ?? "")];
    else {
      // No fixed affix around a completion prompt: the sim engine's own path, uncached.
      const tokens = parsePrompt(r.prompt ?? "", this.tokenizer);
      return { tokens: Uint32Array.from(tokens), blockHashes: blockHashes(tokens, this.blockSize) };
    }
    const parts: ArrayLike<number>[] = [];
    let state = this.root;
    for (const p of pieces) {
      let ids: ArrayLike<number>;
      let pieceKey: bigint;
      if (typeof p === "number") {
        ids = [p];
        pieceKey = SPECIAL_TAG ^ BigInt(p);
      } else {
        pieceKey = Bun.hash.xxHash3(p);
        let hit = this.memo.get(pieceKey);
        if (hit === undefined) {
          // Typed: copying a piece into the prompt is then a memcpy (from a number[] it was ~7 % of a run).
          hit = Uint32Array.from(this.tokenizer.encode(p, { addSpecialTokens: false }));
          this.memo.set(pieceKey, hit, 4 * hit.length + 96);
        }
        ids = hit;
      }
      parts.push(ids);
      const key = childKey(state, pieceKey);
      const known = this.chains.get(key);
      if (known !== undefined) state = known;
      else {
        state = extend(state, key, ids, this.blockSize);
        this.chains.set(key, state, stateBytes(state));
      }
    }
    if (r.messages === undefined && this.affixes !== null && this.affixes.suffix.length > 0) {
      for (const id of this.affixes.suffix) {
        parts.push([id]);
        const key = childKey(state, SPECIAL_TAG ^ BigInt(id));
        state = extend(state, key, [id], this.blockSize);
      }
    }
    // One typed array filled by set() per piece: concat of number[]s was 10 % of a long run.
    let n = 0;
    for (const p of parts) n += p.length;
    const tokens = new Uint32Array(n);
    n = 0;
    for (const p of parts) {
      tokens.set(p, n);
      n += p.length;
    }
    return { tokens, blockHashes: collect(state) };
  }
}
