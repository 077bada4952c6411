// Request preprocessing as the daemon shares it: one Preprocessor (src/preprocess: chat template,
// token ids, KV block hashes, memos, tokenizer threads) for the frontend's routing and for
// /admin/route/explain, so both hash a prompt alike and share one memo.
//
// Started eagerly when the routing policy reads block hashes (router.needs.blockHashes), else lazily on first use
// (explain under a load-only policy should not cost every daemon its tokenizer threads).
import type { ModelConfig, RouterConfig } from "../config/types.ts";
import { defaultConfig } from "../config/index.ts";
import { presetNeeds } from "../router/index.ts";
import { unavailable } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import type { ThreadMemorySource } from "../core/thread-memory.ts";
import { createPreprocessor, type ModelPreprocessor, type PrepareOptions, type PreprocessOptions, type Preprocessor, type PreparedPrompt, type PromptInput } from "./index.ts";

/** What callers need: a prompt's token count and block hashes, as the engine will see it. */
export interface PromptPreparer {
  /** Throws HerdError (404 unknown model, 400 bad prompt, 503 queue full). */
  prepare(model: string, input: PromptInput, opts?: PrepareOptions): Promise<PreparedPrompt>;
}

/**
 * Does routing need each request tokenized and hashed? A shim over the router's own answer
 * (`router.needs.blockHashes`, the union of its stages' needs): pass the Router, the router config
 * (custom `router.pipeline` included), or just `{ policy }` (that preset at its default stages).
 */
export function policyNeedsPrompt(router: { needs: { blockHashes: boolean } } | { policy: string } | RouterConfig): boolean {
  if ("needs" in router) return router.needs.blockHashes;
  if ("pipeline" in router) return presetNeeds(router).blockHashes;
  const defaults = defaultConfig({ hostname: "herd", dataDir: "/nonexistent" }).router;
  return presetNeeds({ ...defaults, policy: router.policy as RouterConfig["policy"] }).blockHashes;
}

export class SharedPreprocessor implements PromptPreparer {
  private created: Promise<Preprocessor> | null = null;
  /** The started preprocessor once `created` has resolved (for `threads`, which must not wait). */
  private started: Preprocessor | null = null;
  private closed = false;

  constructor(
    private readonly models: readonly (Pick<ModelConfig, "name" | "tokenizer" | "block_size"> & { max_model_len?: number })[],
    private readonly opts: PreprocessOptions & { log?: Logger } = {},
  ) {}

  /** Load the tokenizers and start their threads (idempotent); rejects when a tokenizer cannot load. */
  start(): Promise<Preprocessor> {
    if (this.closed) return Promise.reject(unavailable("herd is stopping; request preprocessing is closed", "draining", 1));
    if (!this.created) {
      const created = createPreprocessor(this.models, this.opts);
      this.created = created;
      created.then(
        (p) => (this.started = this.closed ? null : p),
        () => {},
      );
      // A failed start is retried on the next use (e.g. explain after the files were fixed).
      this.created.catch(() => (this.created = null));
    }
    return this.created;
  }

  async prepare(model: string, input: PromptInput, opts?: PrepareOptions): Promise<PreparedPrompt> {
    const pre = await this.start();
    return pre.prepare(model, input, opts);
  }

  /**
   * The model's preprocessor when herd holds the model's own tokenizer (models[].tokenizer set),
   * for /tokenize and /detokenize answered without an engine; null for the built-in fallback (only
   * the sim engine shares it; a real engine's tokenizer differs) or an unknown model.
   */
  async local(model: string): Promise<ModelPreprocessor | null> {
    const m = this.models.find((x) => x.name === model);
    if (!m || m.tokenizer === "") return null;
    return (await this.start()).model(model) ?? null;
  }

  /** The tokenizer threads once started (none before the first use), for GET /admin/debug/memory. */
  threads(): ThreadMemorySource[] {
    return this.started?.threads() ?? [];
  }

  /** Stop the tokenizer threads; a start still under way is closed when it lands. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.started = null;
    void this.created?.then(
      (p) => p.close(),
      () => {},
    );
  }
}
