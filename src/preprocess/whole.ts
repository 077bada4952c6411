// A whole request's prompt → token count and block hashes in one go, on a tokenizer thread
// (worker.ts "whole" job). For prompts whose per-piece work would hold the event loop: a chat with
// more messages than `INLINE_MAX_MESSAGES`, or a prompt that splits into more than
// `INLINE_MAX_PIECES` pieces (added tokens in the text), or a long token-id prompt. The event loop
// then only posts the request's prompt fields and receives one array of hashes.
//
// Same result as the memoised path (model.ts): the chat template as vLLM applies it, the text
// split on added tokens and each piece encoded on its own when the splitter self-check passed
// (else the whole text), completions with the tokenizer's special affixes. No memo: these prompts
// are rare and large, and each piece in a memo costs the event loop more than hashing it here.
import { badRequest } from "../core/errors.ts";
import { blockHashes } from "../kv/hash.ts";
import type { ChatMessage, Tokenizer } from "../tokenizer/index.ts";
import type { Splitter } from "./segments.ts";

/** Chats with more messages than this are prepared on a tokenizer thread (when there is one). */
export const INLINE_MAX_MESSAGES = 64;
/** Prompts splitting into more pieces than this are prepared on a tokenizer thread. */
export const INLINE_MAX_PIECES = 512;
/** Token-id prompts longer than this are hashed on a tokenizer thread. */
export const INLINE_MAX_IDS = 16_384;

/** The prompt fields a whole job needs (structured-cloned to the thread). */
export interface WholeInput {
  messages?: readonly ChatMessage[];
  tools?: unknown[];
  add_generation_prompt?: boolean;
  continue_final_message?: boolean;
  chat_template_kwargs?: Record<string, unknown>;
  /** Completions: the first prompt (text, or token ids). */
  prompt?: string | Uint32Array;
}

export interface WholeJob {
  input: WholeInput;
  blockSize: number;
  segment: boolean;
  affixes: { prefix: number[]; suffix: number[] } | null;
  /** vLLM's extra keys folded into the hashes: the LoRA adapter (every block) and cache_salt (block 0). */
  lora?: string | null;
  cacheSalt?: string | null;
}

export interface WholeResult {
  tokens: number;
  hashes: BigUint64Array;
  hashMs: number;
}

/**
 * continue_final_message, as transformers' apply_chat_template does it: the prompt ends right after
 * the last message's text (its last text part), so the model continues that message instead of
 * seeing the template's end-of-turn tokens.
 */
export function cutAfterFinalMessage(text: string, content: unknown): string {
  let final: string | undefined;
  if (typeof content === "string") final = content;
  else if (Array.isArray(content)) {
    for (let i = content.length - 1; i >= 0 && final === undefined; i--) {
      const part = content[i] as { text?: unknown } | null;
      if (part !== null && typeof part === "object" && typeof part.text === "string") final = part.text;
    }
  }
  if (final === undefined || !text.includes(final.trim())) {
    throw badRequest("continue_final_message is set but the final message does not appear in the rendered chat", "messages");
  }
  const hit = text.includes(final) ? final : final.trim();
  return text.slice(0, text.lastIndexOf(hit) + hit.length);
}

function encodeText(tok: Tokenizer, splitter: Splitter, segment: boolean, text: string, out: number[]): void {
  if (!segment) {
    for (const id of tok.encode(text, { addSpecialTokens: false })) out.push(id);
    return;
  }
  for (const p of splitter.split(text)) {
    if (typeof p === "number") out.push(p);
    else for (const id of tok.encode(p, { addSpecialTokens: false })) out.push(id);
  }
}

/** Tokens and block hashes of a request's prompt (runs on a tokenizer thread). */
export function prepareWhole(tok: Tokenizer, splitter: Splitter, job: WholeJob): WholeResult {
  const { input } = job;
  let ids: ArrayLike<number>;
  if (input.messages !== undefined) {
    const cont = input.continue_final_message === true;
    let text = tok.applyChatTemplate(input.messages, {
      addGenerationPrompt: cont ? false : (input.add_generation_prompt ?? true),
      ...(input.tools ? { tools: input.tools } : {}),
      ...(input.chat_template_kwargs ? { extra: input.chat_template_kwargs } : {}),
    });
    if (cont) text = cutAfterFinalMessage(text, input.messages[input.messages.length - 1]?.content);
    const out: number[] = [];
    encodeText(tok, splitter, job.segment, text, out);
    ids = out;
  } else if (typeof input.prompt === "string") {
    if (job.affixes) {
      const out: number[] = [...job.affixes.prefix];
      encodeText(tok, splitter, job.segment, input.prompt, out);
      for (const id of job.affixes.suffix) out.push(id);
      ids = out;
    } else ids = tok.encode(input.prompt, { addSpecialTokens: true });
  } else if (input.prompt instanceof Uint32Array) {
    ids = input.prompt;
  } else throw badRequest("expected `messages` or a `prompt`", "prompt");
  const t0 = performance.now();
  const hashes = BigUint64Array.from(blockHashes(ids, job.blockSize, { lora: job.lora ?? null, cacheSalt: job.cacheSalt ?? null }));
  return { tokens: ids.length, hashes, hashMs: performance.now() - t0 };
}
