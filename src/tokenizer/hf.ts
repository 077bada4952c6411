// A HuggingFace tokenizer directory (tokenizer.json + tokenizer_config.json [+ generation_config.json])
// loaded with @huggingface/tokenizers (pure JS, bundles into the compiled binary). Exactness against the
// Rust `tokenizers` crate is checked in test/tokenizer/.

import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { join } from "node:path";
import { HerdError } from "../core/errors.ts";
import { ChatTemplate, specialTokenVars, tokenContent } from "./chat.ts";
import type { ChatMessage, ChatTemplateOptions, DecodeOptions, EncodeOptions, Tokenizer } from "./types.ts";

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

/** The chat template may be a string or a list of named templates ({name, template}); "default" wins. */
function pickTemplate(config: Record<string, unknown>, jinjaFile: string | null): string | null {
  if (jinjaFile !== null) return jinjaFile;
  const t = config.chat_template;
  if (typeof t === "string") return t;
  if (Array.isArray(t)) {
    const named = t as { name?: string; template?: string }[];
    return (named.find((x) => x.name === "default") ?? named[0])?.template ?? null;
  }
  return null;
}

export async function loadHfTokenizer(dir: string): Promise<Tokenizer> {
  const tokenizerJson = await readJson(join(dir, "tokenizer.json"), true);
  const config = (await readJson(join(dir, "tokenizer_config.json"), false)) ?? {};
  const genConfig = await readJson(join(dir, "generation_config.json"), false);
  const jinjaPath = join(dir, "chat_template.jinja");
  const jinjaFile = (await Bun.file(jinjaPath).exists()) ? await Bun.file(jinjaPath).text() : null;
  const tok = new HfTokenizer(tokenizerJson!, config);
  const templateSource = pickTemplate(config, jinjaFile);
  const template = templateSource === null ? null : new ChatTemplate(templateSource, specialTokenVars(config));

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
      if (template === null) {
        throw new HerdError(400, "invalid_request_error", `tokenizer ${dir} has no chat template; use /v1/completions`, "no_chat_template", "messages");
      }
      return template.render(messages, opts);
    },
  };
}
