// Request preprocessing for the KV-aware router: the public surface. One ModelPreprocessor per
// configured model; models sharing a tokenizer directory share its tokenizer and worker pool.
//
//   const pre = await createPreprocessor(config.models, { log });
//   …per request, before routing:
//   const p = await pre.prepare(body.model, body);          // HerdError 400/404/503 on bad input
//   router.routeAndBook({ ...route, ...routeFields(p) });   // promptTokens, blockHashes, blockSize
//   …on shutdown: pre.close();
import { availableParallelism } from "node:os";
import type { ModelConfig } from "../config/types.ts";
import { HerdError, errorMessage } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { ThreadMemorySource } from "../core/thread-memory.ts";
import { loadTokenizer } from "../tokenizer/index.ts";
import { ModelPreprocessor, type InlineEncode, type PrepareOptions, type PreparedPrompt, type PromptInput } from "./model.ts";
import { TokenizerPool } from "./pool.ts";
import { verifySkeleton } from "./fast-render.ts";
import { Splitter, loadAddedTokens, specialAffixes, verifySplitter } from "./segments.ts";
import { loadRender, type Render } from "./template.ts";
import type { WorkerInfo } from "./worker.ts";

export { ModelPreprocessor, type ExtraKeys, type PrepareOptions, type PreparedPrompt, type PromptInput } from "./model.ts";
export { TokenizerPool } from "./pool.ts";
export { Splitter, encodePieces, loadAddedTokens, verifySplitter, type AddedToken, type Piece } from "./segments.ts";

export interface PreprocessOptions {
  /** Tokenizer worker threads per distinct tokenizer directory; 0 = encode on the event loop. Default: cores − 1, 1..4. */
  workers?: number;
  /** Token memo budget per model (bytes). Default 64 MiB. */
  tokenCacheBytes?: number;
  /** Hash-chain memo budget per model (bytes). Default 32 MiB. */
  chainCacheBytes?: number;
  /** Cold characters a request may encode on the event loop before the rest goes to workers. Default 256. */
  inlineMaxChars?: number;
  /** Chat prompts through the template skeleton when its self-check passes (fast-render.ts). Default true. */
  skeleton?: boolean;
  log?: Logger;
}

/** The RouteRequest fields a prepared prompt fills (src/router/types.ts). */
export function routeFields(p: PreparedPrompt): { promptTokens: number; blockHashes: readonly bigint[]; blockSize: number } {
  return { promptTokens: p.tokens, blockHashes: p.blockHashes, blockSize: p.blockSize };
}

export class Preprocessor {
  constructor(
    private readonly models: ReadonlyMap<string, ModelPreprocessor>,
    private readonly pools: readonly TokenizerPool[],
  ) {}

  has(model: string): boolean {
    return this.models.has(model);
  }

  model(name: string): ModelPreprocessor | undefined {
    return this.models.get(name);
  }

  /** Tokens and block hashes of a request's prompt. Throws HerdError (404 unknown model, 400 bad prompt, 503 queue full). */
  prepare(model: string, input: PromptInput, opts?: PrepareOptions): Promise<PreparedPrompt> {
    const m = this.models.get(model);
    if (!m) return Promise.reject(new HerdError(404, "invalid_request_error", `The model \`${model}\` does not exist.`, "model_not_found"));
    return m.prepare(input, opts);
  }

  /** Every tokenizer thread, for GET /admin/debug/memory (pool.ts `threads`). */
  threads(): ThreadMemorySource[] {
    // One pool per tokenizer directory: with several, the pool's index keeps the names apart.
    return this.pools.flatMap((p, k) => p.threads(this.pools.length > 1 ? `tokenizer-${k}` : "tokenizer"));
  }

  close(): void {
    for (const p of this.pools) p.close();
  }
}

/** One core stays with the event loop: a thread per other core, at least 1, at most 4. */
export function defaultWorkers(): number {
  return Math.max(1, Math.min(4, availableParallelism() - 1));
}

interface Shared {
  render: Render;
  encodeInline: InlineEncode;
  decodeInline?: (ids: number[]) => string;
  pool: TokenizerPool | null;
  splitter: Splitter;
  segment: boolean;
  affixes: { prefix: number[]; suffix: number[] } | null;
}

/**
 * Load every model's tokenizer and start the worker pools. With worker threads, a HuggingFace
 * tokenizer lives only in them (its vocabulary would add 35–100 ms to every full GC of the event
 * loop, template.ts); the threads report its added tokens, the self-check and the special-token
 * affixes, and the event loop keeps just the chat template. The built-in tokenizer is small and
 * also encodes short pieces inline.
 */
export async function createPreprocessor(models: readonly (Pick<ModelConfig, "name" | "tokenizer" | "block_size"> & { max_model_len?: number })[], opts: PreprocessOptions = {}): Promise<Preprocessor> {
  const byDir = new Map<string, Promise<Shared>>();
  const pools: TokenizerPool[] = [];
  const onLoop = async (dir: string, pool: TokenizerPool | null): Promise<Shared> => {
    const tok = await loadTokenizer(dir === "" ? null : dir);
    const added = await loadAddedTokens(dir, tok);
    const splitter = new Splitter(added);
    const segment = splitter.active && verifySplitter(tok, splitter, added);
    const render: Render = (m, o) => tok.applyChatTemplate(m, o);
    return { render, encodeInline: (t, special) => tok.encode(t, { addSpecialTokens: special }), decodeInline: (ids) => tok.decode(ids), pool, splitter, segment, affixes: specialAffixes(tok) };
  };
  const shared = (dir: string): Promise<Shared> => {
    let s = byDir.get(dir);
    if (!s) {
      s = (async () => {
        const workers = opts.workers ?? defaultWorkers();
        const pool = workers > 0 ? new TokenizerPool(dir, { workers }) : null;
        if (pool === null) return onLoop(dir, null);
        pools.push(pool);
        let info: WorkerInfo;
        try {
          info = await pool.ready();
        } catch (e) {
          pool.close();
          // A bad directory fails here too: loading it on the loop then throws the tokenizer's own error.
          const r = await onLoop(dir, null);
          // Threads unavailable (e.g. a compiled binary built without worker.ts): stay correct,
          // encode on the event loop, and say so loudly.
          opts.log?.error("tokenizer worker threads failed to start; encoding on the event loop", { tokenizer: dir, err: errorMessage(e) });
          return r;
        }
        if (dir === "") return onLoop(dir, pool);
        const splitter = new Splitter(info.added);
        return { render: await loadRender(dir), encodeInline: null, pool, splitter, segment: info.segment, affixes: info.affixes };
      })();
      byDir.set(dir, s);
    }
    return s;
  };
  const out = new Map<string, ModelPreprocessor>();
  try {
    for (const m of models) {
      const s = await shared(m.tokenizer);
      if (s.splitter.active && !s.segment) opts.log?.warn("piece-wise tokenization differs from whole-text; prompt memo off", { model: m.name });
      out.set(
        m.name,
        new ModelPreprocessor(m.name, s.render, s.encodeInline, {
          blockSize: m.block_size,
          pool: s.pool,
          segment: s.segment,
          affixes: s.affixes,
          splitter: s.splitter,
          ...(s.decodeInline ? { decodeInline: s.decodeInline } : {}),
          ...(m.max_model_len ? { maxModelLen: m.max_model_len } : {}),
          // Checked once per model: the skeleton depends on the template and the splitter only.
          skeleton: opts.skeleton !== false && s.segment ? verifySkeleton(s.render, s.splitter) : null,
          ...(opts.tokenCacheBytes !== undefined ? { tokenCacheBytes: opts.tokenCacheBytes } : {}),
          ...(opts.chainCacheBytes !== undefined ? { chainCacheBytes: opts.chainCacheBytes } : {}),
          ...(opts.inlineMaxChars !== undefined ? { inlineMaxChars: opts.inlineMaxChars } : {}),
        }),
      );
    }
  } catch (e) {
    for (const p of pools) p.close();
    throw e;
  }
  return new Preprocessor(out, pools);
}
