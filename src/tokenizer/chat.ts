// Chat templates are Jinja, rendered the way transformers' apply_chat_template does (which is what vLLM
// calls): trim_blocks + lstrip_blocks, `raise_exception` and `strftime_now` (all built into
// @huggingface/jinja's Template), the special tokens of tokenizer_config.json as variables, tools and
// add_generation_prompt. Text content parts are joined with "\n" first, like vLLM's "string" content
// format for text-only models.

import { Template } from "@huggingface/jinja";
import { badRequest } from "../core/errors.ts";
import type { ChatMessage, ChatTemplateOptions } from "./types.ts";

export class ChatTemplate {
  private readonly template: Template;

  constructor(
    source: string,
    private readonly specialTokens: Record<string, unknown>,
  ) {
    this.template = new Template(source);
  }

  render(messages: readonly ChatMessage[], opts: ChatTemplateOptions): string {
    const ctx: Record<string, unknown> = {
      ...this.specialTokens,
      ...(opts.extra ?? {}),
      messages: messages.map(normalizeMessage),
      add_generation_prompt: opts.addGenerationPrompt,
    };
    if (opts.tools !== undefined && opts.tools.length > 0) ctx.tools = opts.tools;
    try {
      return this.template.render(ctx);
    } catch (e) {
      if (e instanceof Error && e.name === "HerdError") throw e;
      throw badRequest(`chat template could not be applied: ${e instanceof Error ? e.message : String(e)}`, "messages");
    }
  }
}

function normalizeMessage(m: ChatMessage): ChatMessage {
  const content = m.content;
  if (!Array.isArray(content)) return m;
  const texts: string[] = [];
  for (const part of content as unknown[]) {
    if (typeof part === "string") texts.push(part);
    else if (part !== null && typeof part === "object" && (part as { type?: unknown }).type === "text") {
      const t = (part as { text?: unknown }).text;
      if (typeof t === "string") texts.push(t);
    }
  }
  return { ...m, content: texts.join("\n") };
}

/** The special-token variables transformers passes to templates, from tokenizer_config.json. */
export function specialTokenVars(config: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of ["bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"]) {
    const v = tokenContent(config[key]);
    if (v !== undefined) out[key] = v;
  }
  if (Array.isArray(config.additional_special_tokens)) {
    out.additional_special_tokens = config.additional_special_tokens.map(tokenContent).filter((x) => x !== undefined);
  }
  return out;
}

/** A special token is either a string or an AddedToken dict `{content: ...}`. */
export function tokenContent(v: unknown): string | undefined {
  if (typeof v === "string") return v;
  if (v !== null && typeof v === "object" && typeof (v as { content?: unknown }).content === "string") {
    return (v as { content: string }).content;
  }
  return undefined;
}
