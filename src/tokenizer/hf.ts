// A HuggingFace tokenizer directory (tokenizer.json + tokenizer_config.json [+ generation_config.json])
// loaded with @huggingface/tokenizers (pure JS, bundles into the compiled binary). Exactness against the
// Rust `tokenizers` crate is checked in test/tokenizer/.

import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { join } from "node:path";
import { HerdError } from "../core/errors.ts";
import { ChatTemplate, specialTokenVars, tokenContent } from "./chat.ts";
import type { AddedToken, ChatMessage, ChatTemplateOptions, DecodeOptions, EncodeOptions, Tokenizer } from "./types.ts";

async function readJson(path: string, required: boolean): Promise<Record<string, unknown> | null> {
  const f = Bun.file(path);
  if (!(await f.exists())) {
    if (required) throw new HerdError(500, "server_error", `tokenizer file not found: ${path}`, "tokenizer_missing");
    return null;
  }
  try {
    return (await f.json()) as Record<string, unknown>;
  } catch (e) {
    throw new HerdError(500, "server_error", `cannot parse ${path}: ${e instanceof Error ? e.message : String(e)}`, "tokenizer_invalid");
  }
}

/**
 * A directory's chat template: chat_template.jinja wins; else tokenizer_config.json's chat_template
 * (a string, or a list of named templates: "default" first). Null when it has none. Exported for
 * src/preprocess/template.ts, which needs the template without loading the vocabulary; `config` is
 * tokenizer_config.json when the caller has already read it.
 */
export async function loadChatTemplate(dir: string, config?: Record<string, unknown>): Promise<ChatTemplate | null> {
  const cfg = config ?? (await readJson(join(dir, "tokenizer_config.json"), false)) ?? {};
  const jinja = Bun.file(join(dir, "chat_template.jinja"));
  let source: string | null = (await jinja.exists()) ? await jinja.text() : null;
  const t = cfg.chat_template;
  if (source === null && typeof t === "string") source = t;
  if (source === null && Array.isArray(t)) {
    const named = t as { name?: string; template?: string }[];
    source = (named.find((x) => x.name === "default") ?? named[0])?.template ?? null;
  }
  return source === null ? null : new ChatTemplate(source, specialTokenVars(cfg));
}

/** What applying the chat template answers for a tokenizer without one. */
export const noChatTemplate = (dir: string) =>
  new HerdError(400, "invalid_request_error", `tokenizer ${dir} has no chat template; use /v1/completions`, "no_chat_template", "messages");

/** tokenizer.json's `added_tokens` (special or not), in file order; entries without an id or content are skipped. */
export async function loadAddedTokens(dir: string): Promise<AddedToken[]> {
  const json = (await readJson(join(dir, "tokenizer.json"), true))!;
  const list = Array.isArray(json.added_tokens) ? json.added_tokens : [];
  const out: AddedToken[] = [];
  for (const t of list as Record<string, unknown>[]) {
    if (typeof t?.id !== "number" || typeof t.content !== "string" || t.content === "") continue;
    out.push({ id: t.id, content: t.content, lstrip: t.lstrip === true, rstrip: t.rstrip === true, single_word: t.single_word === true });
  }
  return out;
}

export async function loadHfTokenizer(dir: string): Promise<Tokenizer> {
  const tokenizerJson = await readJson(join(dir, "tokenizer.json"), true);
  const config = (await readJson(join(dir, "tokenizer_config.json"), false)) ?? {};
  const genConfig = await readJson(join(dir, "generation_config.json"), false);
  const tok = new HfTokenizer(tokenizerJson!, config);
  const template = await loadChatTemplate(dir, config);

  const eos = new Set<number>();
  const eosText = tokenContent(config.eos_token);
  const eosId = eosText === undefined ? undefined : tok.token_to_id(eosText);
  if (eosId !== undefined) eos.add(eosId);
  const genEos = genConfig?.eos_token_id;
  for (const id of Array.isArray(genEos) ? genEos : genEos === undefined ? [] : [genEos]) {
    if (typeof id === "number") eos.add(id);
  }
  const vocabSize = tok.get_vocab(true).size;

  return {
    name: `hf:${dir}`,
    vocabSize,
    eosTokenIds: [...eos],
    encode: (text: string, opts?: EncodeOptions) => tok.encode(text, { add_special_tokens: opts?.addSpecialTokens ?? true }).ids,
    // tokenizers.js throws on an empty list; the Rust crate returns "".
    decode: (ids: readonly number[], opts?: DecodeOptions) =>
      ids.length === 0 ? "" : tok.decode(ids as number[], { skip_special_tokens: opts?.skipSpecialTokens ?? false }),
    applyChatTemplate: (messages: readonly ChatMessage[], opts: ChatTemplateOptions) => {
      if (template === null) throw noChatTemplate(dir);
      return template.render(messages, opts);
    },
    idToToken: (id: number) => tok.id_to_token(id) ?? undefined,
  };
}
