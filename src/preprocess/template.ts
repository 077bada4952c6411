// The chat template alone, for the event loop. A HuggingFace tokenizer's vocabulary and merges are
// hundreds of thousands of heap objects, and every full GC marks them all (35–100 ms measured with
// Qwen3 on this host): so when worker threads encode, the main thread loads only the template —
// picked from a model directory exactly as src/tokenizer/hf.ts does — and never the vocabulary.
// (Asked of the tokenizer owner: export this from src/tokenizer so the two cannot drift; until then
// test/preprocess checks that both render identically.)
import { join } from "node:path";
import { HerdError } from "../core/errors.ts";
import { ChatTemplate, specialTokenVars } from "../tokenizer/chat.ts";
import type { ChatMessage, ChatTemplateOptions } from "../tokenizer/index.ts";

export type Render = (messages: readonly ChatMessage[], opts: ChatTemplateOptions) => string;

async function readJson(path: string): Promise<Record<string, unknown> | null> {
  const f = Bun.file(path);
  if (!(await f.exists())) return null;
  try {
    return (await f.json()) as Record<string, unknown>;
  } catch (e) {
    throw new HerdError(500, "server_error", `cannot parse ${path}: ${e instanceof Error ? e.message : String(e)}`, "tokenizer_invalid");
  }
}

/** chat_template.jinja wins; else tokenizer_config.json's chat_template (a string, or named list: "default" first). */
export async function loadRender(dir: string): Promise<Render> {
  const config = (await readJson(join(dir, "tokenizer_config.json"))) ?? {};
  const jinja = Bun.file(join(dir, "chat_template.jinja"));
  let source: string | null = (await jinja.exists()) ? await jinja.text() : null;
  const t = config.chat_template;
  if (source === null && typeof t === "string") source = t;
  if (source === null && Array.isArray(t)) {
    const named = t as { name?: string; template?: string }[];
    source = (named.find((x) => x.name === "default") ?? named[0])?.template ?? null;
  }
  if (source === null) {
    return () => {
      throw new HerdError(400, "invalid_request_error", `tokenizer ${dir} has no chat template; use /v1/completions`, "no_chat_template", "messages");
    };
  }
  const template = new ChatTemplate(source, specialTokenVars(config));
  return (messages, opts) => template.render(messages, opts);
}
