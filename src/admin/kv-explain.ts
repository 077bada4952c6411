// What the block index says about one request, for POST /admin/route/explain: the prompt's token
// count and block hashes exactly as the router computes them (the daemon's shared preprocessor,
// src/preprocess: the model's chat template as vLLM renders it, encoded as the engine encodes it,
// hashed at the model's block size), and per worker the number of leading blocks it holds on each
// medium. Sharing the preprocessor with the frontend is the point: explain shows the hashes routing
// used, not a second tokenization that could drift from it.
import { HerdError, errorMessage } from "../core/errors.ts";
import type { Config } from "../config/types.ts";
import type { KvConsumer, KvStreamView } from "../kv/consumer.ts";
import type { Overlap } from "../kv/indexer.ts";
import type { PromptPreparer } from "../preprocess/shared.ts";
import type { ExtraKeys, PromptInput } from "../preprocess/index.ts";

export interface KvExplain {
  block_size: number;
  prompt_tokens: number;
  prompt_blocks: number;
  /** Sequence hashes of the prompt's full blocks (what the router matches). */
  block_hashes: readonly bigint[];
  /** Preprocessing time per stage, ms (render, tokenize, hash). */
  timings: { render_ms: number; tokenize_ms: number; hash_ms: number };
  /** vLLM's block-hash extra keys folded into the hashes (LoRA adapter, cache_salt); null when absent. */
  extra_keys: ExtraKeys;
  /** Leading prompt blocks held per worker, per medium; workers holding none are absent. */
  overlaps: Map<string, Overlap>;
}

/** The part of AdminBackend the KV index provides. */
export interface KvAdminBackend {
  kvStatus(workerId: string): KvStreamView | null;
  kvExplain(model: string, body: Record<string, unknown>, chat: boolean): Promise<KvExplain>;
}

export function kvAdminBackend(config: Config, kv: KvConsumer, prompts: PromptPreparer): KvAdminBackend {
  return {
    kvStatus: (id) => kv.status(id),
    async kvExplain(modelName, body, chat) {
      // A LoRA adapter's name explains on its base model, hashed with the adapter (as routing does).
      const adapterOf = config.models.find((m) => m.lora_adapters.some((a) => a.name === modelName));
      const model = config.models.find((m) => m.name === modelName) ?? adapterOf;
      if (!model) throw new HerdError(404, "not_found_error", `The model \`${modelName}\` does not exist.`, "model_not_found", "model");
      // One endpoint, two shapes: a chat body is rendered by its template, anything else is a prompt.
      const input: PromptInput = chat
        ? (body as PromptInput)
        : { prompt: body.prompt as PromptInput["prompt"], ...(body.cache_salt !== undefined ? { cache_salt: body.cache_salt as string } : {}) };
      // The adapter named as the model, else the explain-only field `lora_name`.
      const lora = adapterOf ? modelName : typeof body.lora_name === "string" && body.lora_name !== "" ? body.lora_name : undefined;
      let p;
      try {
        p = await prompts.prepare(model.name, input, lora !== undefined ? { lora } : undefined);
      } catch (e) {
        if (e instanceof HerdError) throw e;
        throw new HerdError(500, "server_error", `tokenizer of model ${model.name} cannot be loaded: ${errorMessage(e)}`, "tokenizer_unavailable");
      }
      return {
        block_size: p.blockSize,
        prompt_tokens: p.tokens,
        prompt_blocks: p.blockHashes.length,
        block_hashes: p.blockHashes,
        timings: p.timings,
        extra_keys: p.extraKeys,
        overlaps: kv.overlaps(p.blockHashes),
      };
    },
  };
}
