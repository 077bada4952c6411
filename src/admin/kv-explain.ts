// What the block index says about one request, for POST /admin/route/explain: the prompt's token
// ids exactly as the engine will see them, hashed into blocks at the model's block size, and per
// worker the number of leading blocks it holds on each medium.
//
// Tokens must match the engine's token for token, or no block would ever match: chat bodies go
// through the model's chat template and are encoded without special tokens, completion strings
// with them, token-id prompts are taken as given — the same functions the simulated engine uses
// (engine/sim/openai.ts), which follow vLLM's serving code.
import { HerdError, errorMessage } from "../core/errors.ts";
import type { Config, ModelConfig } from "../config/types.ts";
import { parsePrompt, renderChat } from "../engine/sim/openai.ts";
import type { KvConsumer, KvStreamView } from "../kv/consumer.ts";
import { blockHashes } from "../kv/hash.ts";
import type { Overlap } from "../kv/indexer.ts";
import { loadTokenizer, type Tokenizer } from "../tokenizer/index.ts";

export interface KvExplain {
  block_size: number;
  prompt_tokens: number;
  prompt_blocks: number;
  /** Leading prompt blocks held per worker, per medium; workers holding none are absent. */
  overlaps: Map<string, Overlap>;
}

/** The part of AdminBackend the KV index provides. */
export interface KvAdminBackend {
  kvStatus(workerId: string): KvStreamView | null;
  kvExplain(model: string, body: Record<string, unknown>, chat: boolean): Promise<KvExplain>;
}

export async function promptTokens(model: ModelConfig, body: Record<string, unknown>, chat: boolean, tok?: Tokenizer): Promise<number[]> {
  let t = tok;
  if (!t) {
    try {
      t = await loadTokenizer(model.tokenizer || null);
    } catch (e) {
      throw new HerdError(500, "server_error", `tokenizer of model ${model.name} cannot be loaded: ${errorMessage(e)}`, "tokenizer_unavailable");
    }
  }
  return chat ? t.encode(renderChat(body, t), { addSpecialTokens: false }) : parsePrompt(body.prompt, t);
}

export function kvAdminBackend(config: Config, kv: KvConsumer): KvAdminBackend {
  return {
    kvStatus: (id) => kv.status(id),
    async kvExplain(modelName, body, chat) {
      const model = config.models.find((m) => m.name === modelName);
      if (!model) throw new HerdError(404, "not_found_error", `The model \`${modelName}\` does not exist.`, "model_not_found", "model");
      const tokens = await promptTokens(model, body, chat);
      const hashes = blockHashes(tokens, model.block_size);
      return { block_size: model.block_size, prompt_tokens: tokens.length, prompt_blocks: hashes.length, overlaps: kv.overlaps(hashes) };
    },
  };
}
