// Request preprocessing as the daemon shares it: one Preprocessor (src/preprocess: chat template,
// token ids, KV block hashes, memos, tokenizer threads) for the frontend's routing and for
// /admin/route/explain, so both hash a prompt alike and share one memo.
//
// Started eagerly when the routing policy reads block hashes (kv, prefix), else lazily on first use
// (explain under a load-only policy should not cost every daemon its tokenizer threads).
import type { ModelConfig } from "../config/types.ts";
import { unavailable } from "../core/errors.ts";
import type { Logger } from "../core/log.ts";
import { createPreprocessor, type PreprocessOptions, type Preprocessor, type PreparedPrompt, type PromptInput } from "./index.ts";

/** What callers need: a prompt's token count and block hashes, as the engine will see it. */
export interface PromptPreparer {
  /** Throws HerdError (404 unknown model, 400 bad prompt, 503 queue full). */
  prepare(model: string, input: PromptInput): Promise<PreparedPrompt>;
}

/** Policies whose decisions read the prompt's block hashes (their pipeline's cost needs overlap). */
const HASH_POLICIES: ReadonlySet<string> = new Set(["kv", "prefix"]);

/** Does routing under this config need each request tokenized and hashed? */
export function policyNeedsPrompt(router: { policy: string }): boolean {
  return HASH_POLICIES.has(router.policy);
}

export class SharedPreprocessor implements PromptPreparer {
  private created: Promise<Preprocessor> | null = null;
  private closed = false;

  constructor(
    private readonly models: readonly (Pick<ModelConfig, "name" | "tokenizer" | "block_size"> & { max_model_len?: number })[],
    private readonly opts: PreprocessOptions & { log?: Logger } = {},
  ) {}

  /** Load the tokenizers and start their threads (idempotent); rejects when a tokenizer cannot load. */
  start(): Promise<Preprocessor> {
    if (this.closed) return Promise.reject(unavailable("herd is stopping; request preprocessing is closed", "draining", 1));
    if (!this.created) {
      this.created = createPreprocessor(this.models, this.opts);
      // A failed start is retried on the next use (e.g. explain after the files were fixed).
      this.created.catch(() => (this.created = null));
    }
    return this.created;
  }

  async prepare(model: string, input: PromptInput): Promise<PreparedPrompt> {
    const pre = await this.start();
    return pre.prepare(model, input);
  }

  /** Stop the tokenizer threads; a start still under way is closed when it lands. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    void this.created?.then(
      (p) => p.close(),
      () => {},
    );
  }
}
