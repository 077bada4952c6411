// The chat template alone, for the event loop. A HuggingFace tokenizer's vocabulary and merges are
// hundreds of thousands of heap objects, and every full GC marks them all (35–100 ms measured with
// Qwen3 on this host): so when worker threads encode, the main thread loads only the template —
// with src/tokenizer's own loader, so it is picked exactly as the full tokenizer picks it — and
// never the vocabulary.
import type { ChatMessage, ChatTemplateOptions } from "../tokenizer/index.ts";
import { loadChatTemplate, noChatTemplate } from "../tokenizer/index.ts";

export type Render = (messages: readonly ChatMessage[], opts: ChatTemplateOptions) => string;

export async function loadRender(dir: string): Promise<Render> {
  const template = await loadChatTemplate(dir);
  if (template === null) {
    return () => {
      throw noChatTemplate(dir);
    };
  }
  return (messages, opts) => template.render(messages, opts);
}
