// One model's request preprocessing: OpenAI request → the exact prompt text vLLM would build →
// pieces between added tokens → token ids (memo, inline or worker pool) → block hashes (memoised
// along the pieces, chain.ts). Timings per stage ride along for the routing-latency metrics.
//
// Where the time goes and why it is split this way: rendering the chat template and splitting are
// linear scans (~0.3 ms for 128 KiB); encoding is 5–20 µs per token, so a cold 16k-token piece
// takes 100+ ms and must leave the event loop; small cold pieces (a new user turn) are cheaper to
// encode inline than to ship to a thread, up to `inlineMaxChars` per request.
import { HerdError, badRequest } from "../core/errors.ts";
import { blockHashes } from "../kv/hash.ts";
import type { ChatMessage } from "../tokenizer/index.ts";
import { childKey, collect, extend, extendWith, rootState, stateBytes, type ChainState } from "./chain.ts";
import { ByteLru } from "./lru.ts";
import type { TokenizerPool } from "./pool.ts";
import { partsKey, pieceText, skeletonPieces, type SkeletonCheck, type SkeletonPiece } from "./fast-render.ts";
import { Splitter, type Piece } from "./segments.ts";
import type { Render } from "./template.ts";
import { INLINE_MAX_IDS, INLINE_MAX_MESSAGES, INLINE_MAX_PIECES, cutAfterFinalMessage, type WholeInput } from "./whole.ts";

/** Encoding on the event loop; null when the vocabulary lives only in the worker threads. */
export type InlineEncode = ((text: string, addSpecialTokens: boolean) => number[]) | null;

export interface ModelPreprocessorOptions {
  blockSize: number;
  /** Byte budget of the per-piece token memo (default 64 MiB). */
  tokenCacheBytes?: number;
  /** Byte budget of the hash-chain memo (default 32 MiB). */
  chainCacheBytes?: number;
  /** Characters of cold pieces a request may encode on the event loop (default 256). */
  inlineMaxChars?: number;
  /** Worker threads for cold pieces; null = encode everything inline (tests, tiny deployments). */
  pool: TokenizerPool | null;
  /** Split on added tokens and memoise per piece; false when the self-check failed. */
  segment: boolean;
  /** Ids the tokenizer adds with addSpecialTokens (completions), or null when not a fixed affix. */
  affixes: { prefix: number[]; suffix: number[] } | null;
  splitter: Splitter;
  /** Decoding on the event loop (the built-in tokenizer); absent = on the pool. */
  decodeInline?: (ids: number[]) => string;
  /** Chat prompts through the template skeleton (fast-render.ts): what its self-check allows; null/absent = off. */
  skeleton?: SkeletonCheck | null;
  /** Byte budget of the memo of flat hash arrays at resumption states (default 16 MiB). */
  flatCacheBytes?: number;
  /** The model's context window (config `max_model_len`); a longer prompt is a 400. 0/absent = unknown. */
  maxModelLen?: number;
}

/** The request fields preprocessing reads (already validated by the frontend). */
export interface PromptInput {
  /** Chat: rendered with the chat template. */
  messages?: readonly ChatMessage[];
  tools?: unknown[];
  /** vLLM extension; default true. */
  add_generation_prompt?: boolean;
  /** vLLM extension: continue the last assistant message instead of starting a new one. */
  continue_final_message?: boolean;
  chat_template_kwargs?: Record<string, unknown>;
  /** Completions: text (encoded with special tokens, like vLLM) or token ids (hashed as given). */
  prompt?: string | readonly number[] | readonly string[] | readonly (readonly number[])[];
  /** vLLM request field: a block-hash extra key of block 0, so salted prompts share no cache with others. */
  cache_salt?: string;
}

/** Hash inputs beside the prompt that are not request-body fields. */
export interface PrepareOptions {
  /** LoRA adapter the request runs under (vLLM: the `model` names a --lora-modules entry); absent = base model. */
  lora?: string;
}

/** vLLM's block-hash extra keys a prepared prompt was hashed with (explain shows them). */
export interface ExtraKeys {
  lora_name: string | null;
  cache_salt: string | null;
}

export interface PreparedPrompt {
  tokens: number;
  blockHashes: bigint[];
  blockSize: number;
  /**
   * ms per stage: render (template + split), tokenize (memo lookups + encoding, incl. waiting on
   * workers), hash. Finer, within those: resume (piece keys + chain memo walk, part of tokenize),
   * wait (awaiting the worker thread: hop + its encoding and hashing; 0 without a job).
   */
  timings: { render_ms: number; tokenize_ms: number; hash_ms: number; resume_ms?: number; wait_ms?: number };
  /** pieces: total; reused: skipped via the hash chain; memo: token memo hits; inline / pooled: encoded; skeleton: via fast-render.ts. */
  pieces: { total: number; reused: number; memo: number; inline: number; pooled: number; skeleton: boolean };
  extraKeys: ExtraKeys;
}

const SPECIAL_TAG = 0x5350_4543_0000_0000n;
const now = () => performance.now();

export class ModelPreprocessor {
  private readonly tokenMemo: ByteLru<bigint, Uint32Array>;
  private readonly chains: ByteLru<bigint, ChainState>;
  private readonly flats: ByteLru<bigint, readonly bigint[]>;
  private readonly root: ChainState;
  private readonly inlineMaxChars: number;

  constructor(
    readonly model: string,
    private readonly renderTemplate: Render,
    private readonly encodeInline: InlineEncode,
    private readonly o: ModelPreprocessorOptions,
  ) {
    if (encodeInline === null && o.pool === null) throw new Error("ModelPreprocessor needs an inline tokenizer or a worker pool");
    this.tokenMemo = new ByteLru(o.tokenCacheBytes ?? 64 * 2 ** 20);
    this.chains = new ByteLru(o.chainCacheBytes ?? 32 * 2 ** 20);
    this.flats = new ByteLru(o.flatCacheBytes ?? 16 * 2 ** 20);
    this.root = rootState(o.blockSize, undefined);
    this.inlineMaxChars = o.inlineMaxChars ?? 256;
  }

  get blockSize(): number {
    return this.o.blockSize;
  }

  /** Prompt text exactly as vLLM builds it for a chat request. */
  render(input: PromptInput): string {
    const messages = input.messages ?? [];
    const cont = input.continue_final_message === true;
    const text = this.renderTemplate(messages, {
      addGenerationPrompt: cont ? false : (input.add_generation_prompt ?? true),
      ...(input.tools ? { tools: input.tools } : {}),
      ...(input.chat_template_kwargs ? { extra: input.chat_template_kwargs } : {}),
    });
    return cont ? cutAfterFinalMessage(text, messages[messages.length - 1]?.content) : text;
  }

  /**
   * Tokens and block hashes of a request's prompt. Work on the event loop is bounded: a prompt with
   * more than INLINE_MAX_MESSAGES messages, INLINE_MAX_PIECES pieces or INLINE_MAX_IDS token ids is
   * prepared whole on a tokenizer thread (whole.ts). Throws a 400 `context_length_exceeded` when the
   * prompt alone is longer than the model's max_model_len.
   */
  async prepare(input: PromptInput, opts: PrepareOptions = {}): Promise<PreparedPrompt> {
    const p = await this.prepareIn(input, namespaceOf(input, opts));
    const max = this.o.maxModelLen ?? 0;
    if (max > 0 && p.tokens > max) {
      throw new HerdError(
        400,
        "invalid_request_error",
        `This model's maximum context length is ${max} tokens; the prompt has ${p.tokens} tokens.`,
        "context_length_exceeded",
        input.messages !== undefined ? "messages" : "prompt",
      );
    }
    return p;
  }

  private async prepareIn(input: PromptInput, ns: Namespace): Promise<PreparedPrompt> {
    const t0 = now();
    const offload = this.o.pool !== null;
    if (input.messages === undefined) {
      const p = input.prompt;
      const first = Array.isArray(p) && p.length > 0 && (typeof p[0] !== "number") ? p[0] : p;
      if (Array.isArray(first)) {
        const ids = first as readonly number[];
        if (offload && ids.length > INLINE_MAX_IDS) return this.whole({ prompt: idArray(ids) }, t0, ns);
        return this.fromIds(ids, t0, ns);
      }
      if (typeof first !== "string") throw badRequest("expected `messages` or a `prompt`", "prompt");
      const pieces = this.pieces(first, offload ? INLINE_MAX_PIECES : Infinity);
      if (pieces === null) return this.whole({ prompt: first }, t0, ns);
      if (this.o.affixes) return this.fromPieces([...this.o.affixes.prefix, ...pieces, ...this.o.affixes.suffix], t0, now(), ns);
      // No fixed affix: encode the whole prompt with its special tokens (off the loop when long), no memo.
      return this.fromPieces([first], t0, now(), ns, true);
    }
    if (offload && input.messages.length > INLINE_MAX_MESSAGES) return this.whole(wholeChat(input), t0, ns);
    if (this.o.skeleton && !input.tools && !input.chat_template_kwargs && input.continue_final_message !== true) {
      const sk = skeletonPieces(this.renderTemplate, this.o.splitter, input.messages, input.add_generation_prompt ?? true, this.o.skeleton);
      if (sk !== null) return this.fromPieces(sk, t0, now(), ns);
    }
    const text = this.render(input);
    const pieces = this.pieces(text, offload ? INLINE_MAX_PIECES : Infinity);
    if (pieces === null) return this.whole(wholeChat(input), t0, ns);
    return this.fromPieces(pieces, t0, now(), ns);
  }

  /** The whole prompt on a tokenizer thread: one job, one array of hashes back, no memo. */
  private async whole(input: WholeInput, t0: number, ns: Namespace): Promise<PreparedPrompt> {
    const t1 = now();
    const r = await this.o.pool!.whole({
      input, blockSize: this.o.blockSize, segment: this.o.segment, affixes: this.o.affixes, lora: ns.lora ?? null, cacheSalt: ns.keys.cache_salt,
    });
    const t2 = now();
    const hashes = new Array<bigint>(r.hashes.length);
    for (let k = 0; k < hashes.length; k++) hashes[k] = r.hashes[k]!;
    const t3 = now();
    return {
      tokens: r.tokens,
      blockHashes: hashes,
      blockSize: this.o.blockSize,
      timings: { render_ms: t1 - t0, tokenize_ms: t2 - t1 - r.hashMs, hash_ms: t3 - t2 + r.hashMs, resume_ms: 0, wait_ms: t2 - t1 },
      pieces: { total: 0, reused: 0, memo: 0, inline: 0, pooled: 1, skeleton: false },
      extraKeys: ns.keys,
    };
  }

  /** Token ids of a text through the same memo and pool as prepare() (equivalence tests, tooling). */
  async encode(text: string, addSpecialTokens: boolean): Promise<number[]> {
    if (addSpecialTokens && !this.o.affixes) {
      return this.encodeInline ? this.encodeInline(text, true) : [...(await this.o.pool!.encode([text], true))[0]!];
    }
    const pieces = this.pieces(text);
    const all: Piece[] = addSpecialTokens ? [...this.o.affixes!.prefix, ...pieces, ...this.o.affixes!.suffix] : pieces;
    const ids = await this.tokensOf(all, { memo: 0, inline: 0, pooled: 0 });
    const out: number[] = [];
    for (const a of ids) for (let i = 0; i < a.length; i++) out.push(a[i]!);
    return out;
  }

  /** Text of token ids, as the engine's /detokenize (tokenizer decode, special tokens kept). */
  decode(ids: number[]): Promise<string> {
    if (this.o.decodeInline) return Promise.resolve(this.o.decodeInline(ids));
    if (this.o.pool === null) return Promise.reject(new HerdError(500, "server_error", "no tokenizer to decode with", "tokenizer_error"));
    return this.o.pool.decode(ids);
  }

  /** Memo sizes, for metrics and tests. */
  cacheStats(): { tokenBytes: number; tokenEntries: number; chainBytes: number; chainEntries: number } {
    return { tokenBytes: this.tokenMemo.bytes, tokenEntries: this.tokenMemo.size, chainBytes: this.chains.bytes, chainEntries: this.chains.size };
  }

  private pieces(text: string): Piece[];
  private pieces(text: string, maxPieces: number): Piece[] | null;
  private pieces(text: string, maxPieces = Infinity): Piece[] | null {
    return this.o.segment ? this.o.splitter.split(text, maxPieces) : text === "" ? [] : [text];
  }

  private fromIds(ids: readonly number[], t0: number, ns: Namespace): PreparedPrompt {
    for (const id of ids) if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) throw badRequest("token ids must be integers in [0, 2^32)", "prompt");
    const t1 = now();
    const hashes = blockHashes(ids, this.o.blockSize, { lora: ns.lora ?? null, cacheSalt: ns.keys.cache_salt });
    return {
      tokens: ids.length,
      blockHashes: hashes,
      blockSize: this.o.blockSize,
      timings: { render_ms: 0, tokenize_ms: t1 - t0, hash_ms: now() - t1 },
      pieces: { total: 0, reused: 0, memo: 0, inline: 0, pooled: 0, skeleton: false },
      extraKeys: ns.keys,
    };
  }

  private async fromPieces(pieces: readonly SkeletonPiece[] | readonly Piece[], t0: number, t1: number, ns: Namespace, whole = false): Promise<PreparedPrompt> {
    // Resume from the deepest state the chain memo knows.
    const keys = pieces.map((p, k) => (whole ? BigInt(k) : this.pieceKey(p)));
    const lora = ns.lora;
    let state = ns.lora === undefined && ns.keys.cache_salt === null ? this.root : rootState(this.o.blockSize, ns.lora, ns.keys.cache_salt);
    let i = 0;
    if (!whole) {
      for (; i < pieces.length; i++) {
        const s = this.chains.get(childKey(state, keys[i]!));
        if (s === undefined) break;
        state = s;
      }
    }
    const resumed = state;
    const tResumed = now();
    let waitMs = 0;
    const stats = { total: pieces.length, reused: i, memo: 0, inline: 0, pooled: 0, skeleton: pieces.some((p) => typeof p === "object") };
    // Only the pieces after the resumption point are ever flattened to text.
    const rest: Piece[] = [];
    for (let k = i; k < pieces.length; k++) {
      const p = pieces[k]!;
      rest.push(typeof p === "object" ? pieceText(p) : p);
    }
    const known = this.localTokens(rest, stats, whole);
    const remote = missing(known);
    let hashMs = 0;
    let t2: number;
    let prefix: readonly bigint[];
    if (remote.length > 0 && !whole) {
      // Cold pieces left: the worker encodes them and hashes the whole rest, off the event loop;
      // meanwhile the loop lays out the resumed prefix's hashes.
      const job = this.o.pool!.chain({
        last: state.last,
        tail: state.tail,
        blockSize: this.o.blockSize,
        ...(lora !== undefined ? { lora } : {}),
        items: rest.map((p, k) => known[k] ?? (p as string)),
      });
      prefix = this.prefixHashes(resumed);
      const tJob = now();
      const r = await job;
      t2 = now();
      waitMs = t2 - tJob;
      hashMs = r.hashMs;
      for (const k of remote) this.remember(rest[k] as string, r.ids[k]!, false);
      for (let k = 0; k < rest.length; k++) {
        state = extendWith(state, childKey(state, keys[i + k]!), r.ids[k]!.length, { hashes: r.hashes[k]!, tail: r.tails[k]!, last: r.lasts[k]! });
        this.chains.set(state.key, state, stateBytes(state));
      }
      stats.pooled += remote.length;
    } else {
      if (remote.length > 0) {
        // A whole prompt with special tokens (no fixed affix): encoded in the pool, hashed here.
        const got = await this.o.pool!.encode(remote.map((k) => rest[k] as string), true);
        remote.forEach((k, j) => (known[k] = got[j]!));
        stats.pooled += remote.length;
      }
      t2 = now();
      prefix = this.prefixHashes(resumed);
      for (let k = 0; k < rest.length; k++) {
        state = extend(state, childKey(state, keys[i + k]!), known[k]!, this.o.blockSize, lora);
        if (!whole) this.chains.set(state.key, state, stateBytes(state));
      }
    }
    const hashes = appendFrom(prefix, resumed, state);
    const t3 = now();
    return {
      tokens: state.tokens,
      blockHashes: hashes,
      blockSize: this.o.blockSize,
      timings: { render_ms: t1 - t0, tokenize_ms: t2 - t1 - hashMs, hash_ms: t3 - t2 + hashMs, resume_ms: tResumed - t1, wait_ms: waitMs },
      pieces: stats,
      extraKeys: ns.keys,
    };
  }

  /**
   * The block hashes up to a resumption state, from a memo of flat arrays: walking the chain
   * allocates one bigint per block (2,000 for 32k tokens) on every request, the memo none.
   */
  private prefixHashes(state: ChainState): readonly bigint[] {
    if (state.blocks === 0) return [];
    const hit = this.flats.get(state.key);
    if (hit !== undefined) return hit;
    const all = collect(state);
    this.flats.set(state.key, all, 64 + all.length * 48);
    return all;
  }

  private pieceKey(p: SkeletonPiece | Piece): bigint {
    if (typeof p === "number") return SPECIAL_TAG ^ BigInt(p);
    if (typeof p === "string") return Bun.hash.xxHash3(p);
    // One part is the piece's whole text: the same key as the ordinary path, so memos are shared.
    return p.parts.length === 1 ? Bun.hash.xxHash3(p.parts[0]!) : partsKey(p);
  }

  /** Ids of each piece: added tokens as themselves, text from the memo, inline, or the pool. */
  /**
   * Ids of the pieces known without a worker: added tokens, memo hits, and short cold pieces encoded
   * inline (shortest first, within the request's inline budget); undefined where a worker is needed.
   * `whole`: pieces are whole prompts encoded with special tokens, bypassing the memo.
   */
  private localTokens(pieces: readonly Piece[], stats: { memo: number; inline: number }, whole = false): (Uint32Array | undefined)[] {
    const out: (Uint32Array | undefined)[] = new Array(pieces.length);
    const cold: number[] = [];
    for (let k = 0; k < pieces.length; k++) {
      const p = pieces[k]!;
      if (typeof p === "number") {
        out[k] = Uint32Array.of(p);
        continue;
      }
      const hit = whole ? undefined : this.tokenMemo.get(Bun.hash.xxHash3(p));
      if (hit) {
        out[k] = hit;
        stats.memo++;
      } else cold.push(k);
    }
    cold.sort((a, b) => (pieces[a] as string).length - (pieces[b] as string).length);
    const encode = this.encodeInline;
    if (encode === null) return out;
    let budget = this.o.pool ? this.inlineMaxChars : Infinity;
    for (const k of cold) {
      const p = pieces[k] as string;
      if (p.length > budget) break;
      budget -= p.length;
      out[k] = this.remember(p, Uint32Array.from(encode(p, whole)), whole);
      stats.inline++;
    }
    return out;
  }

  /** Ids of every piece: local ones, then the rest from the pool. */
  private async tokensOf(pieces: readonly Piece[], stats: { memo: number; inline: number; pooled: number }): Promise<ArrayLike<number>[]> {
    const out = this.localTokens(pieces, stats);
    const remote = missing(out);
    if (remote.length > 0) {
      const got = await this.o.pool!.encode(remote.map((k) => pieces[k] as string));
      remote.forEach((k, j) => (out[k] = this.remember(pieces[k] as string, got[j]!, false)));
      stats.pooled += remote.length;
    }
    return out as ArrayLike<number>[];
  }

  private remember(text: string, ids: Uint32Array, whole: boolean): Uint32Array {
    if (!whole) this.tokenMemo.set(Bun.hash.xxHash3(text), ids, ids.byteLength + 96);
    return ids;
  }
}

interface Namespace {
  lora: string | undefined;
  keys: ExtraKeys;
}

function namespaceOf(input: PromptInput, opts: PrepareOptions): Namespace {
  const salt = input.cache_salt;
  if (salt !== undefined && salt !== null && typeof salt !== "string") throw badRequest("cache_salt must be a string", "cache_salt");
  const lora = opts.lora === "" ? undefined : opts.lora;
  return { lora, keys: { lora_name: lora ?? null, cache_salt: salt ? salt : null } };
}

/** `prefix` (the hashes up to `from`) followed by those of the states after it, down to `to`. */
function appendFrom(prefix: readonly bigint[], from: ChainState, to: ChainState): bigint[] {
  const out = new Array<bigint>(to.blocks);
  for (let k = 0; k < prefix.length; k++) out[k] = prefix[k]!;
  let end = to.blocks;
  for (let s: ChainState | null = to; s !== null && s !== from && end > prefix.length; s = s.parent) {
    const hs = s.hashes;
    end -= hs.length;
    for (let k = 0; k < hs.length; k++) out[end + k] = hs[k]!;
  }
  return out;
}

/** Indexes of the pieces still without ids (a loop: array methods skip the holes of `new Array(n)`). */
function missing(ids: readonly (Uint32Array | undefined)[]): number[] {
  const out: number[] = [];
  for (let k = 0; k < ids.length; k++) if (ids[k] === undefined) out.push(k);
  return out;
}

/** The fields of a chat request a whole job needs (nothing else is cloned to the thread). */
function wholeChat(input: PromptInput): WholeInput {
  return {
    messages: input.messages!,
    ...(input.tools ? { tools: input.tools } : {}),
    ...(input.add_generation_prompt !== undefined ? { add_generation_prompt: input.add_generation_prompt } : {}),
    ...(input.continue_final_message !== undefined ? { continue_final_message: input.continue_final_message } : {}),
    ...(input.chat_template_kwargs ? { chat_template_kwargs: input.chat_template_kwargs } : {}),
  };
}

/** Token ids as u32 (checked here, as fromIds does, so the thread gets exact values). */
function idArray(ids: readonly number[]): Uint32Array {
  const out = new Uint32Array(ids.length);
  for (let k = 0; k < ids.length; k++) {
    const id = ids[k]!;
    if (!Number.isInteger(id) || id < 0 || id > 0xffffffff) throw badRequest("token ids must be integers in [0, 2^32)", "prompt");
    out[k] = id;
  }
  return out;
}
