// POST /v1/responses around the request lifecycle: `previous_response_id` expanded from herd's own
// bounded store (the conversation so far as input items, so any engine can serve the follow-up and
// none needs a store of its own), the prompt for KV-aware hashing (instructions + input through the
// chat template, exactly what a chat request with the same turns would hash to), and a tap on the
// answer that stores the finished response (its id and output) as it passes to the client.
//
// Affinity: the expanded conversation starts with the previous turns, whose KV blocks the worker
// that served the previous response holds, so the kv/prefix policies route the follow-up there
// (the cache hit), and every request of a conversation carries the conversation's id as its session
// id when the client sent none, so the session scorer (part of the default kv pipeline) and the
// session policy keep the conversation on the worker that served its last turn. The store is per node (docs/api.md says what that means in a cluster).
import { HerdError } from "../core/errors.ts";
import { ByteLru } from "../preprocess/lru.ts";
import type { PromptInput } from "../preprocess/index.ts";
import { chatTools, conversation, type ChatMsg } from "../protocol/responses.ts";
import type { CheckedRequest } from "../protocol/openai.ts";
import type { Answer } from "../request/lifecycle.ts";
import type { ReadResult } from "../request/upstream.ts";
import type { RelaySource } from "../request/relay.ts";

interface Stored {
  /** The conversation up to and including this response's output, as Responses input items. */
  items: unknown[];
  workerId: string;
  /** The conversation's id (session id for the router's session stages). */
  root: string;
}

/** The largest final response event the tap reads (a bigger response is relayed, not stored). */
const MAX_EVENT_BYTES = 4 * 1024 * 1024;

export interface PreparedResponses {
  /** The body for the engine: previous turns inlined, previous_response_id removed. */
  body: Record<string, unknown>;
  /** What the router hashes (chat template input). */
  prompt: PromptInput;
  /** The conversation's id: a new one for a first turn, the stored one for a follow-up. */
  sessionId: string;
  /** Turns of the conversation before this request's output (stored with the answer). */
  items: unknown[];
  store: boolean;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/** A Responses `input` as a list of input items (a string is one user message). */
function asItems(input: unknown): unknown[] {
  return typeof input === "string" ? [{ type: "message", role: "user", content: input }] : Array.isArray(input) ? input : [];
}

/** A response's output items as input items of the next turn (reasoning items are not carried). */
function outputItems(output: unknown): unknown[] {
  if (!Array.isArray(output)) return [];
  const out: unknown[] = [];
  for (const it of output) {
    if (!isObj(it)) continue;
    if (it.type === "message") {
      const text = Array.isArray(it.content) ? it.content.map((p) => (isObj(p) && typeof p.text === "string" ? p.text : "")).join("") : "";
      out.push({ type: "message", role: "assistant", content: text });
    } else if (it.type === "function_call") out.push({ type: "function_call", call_id: it.call_id, name: it.name, arguments: it.arguments });
  }
  return out;
}

function itemsBytes(items: unknown[]): number {
  return JSON.stringify(items).length * 2 + 64;
}

export class ResponsesStore {
  private readonly lru: ByteLru<string, Stored>;

  constructor(maxBytes: number) {
    this.lru = new ByteLru(maxBytes);
  }

  get size(): number {
    return this.lru.size;
  }

  /** Expand the request against the store; 404 for an unknown previous_response_id, as OpenAI. */
  prepare(checked: CheckedRequest, model: string): PreparedResponses {
    const body: Record<string, unknown> = { ...checked.body, model };
    const prevId = typeof body.previous_response_id === "string" ? body.previous_response_id : null;
    let prev: Stored | undefined;
    if (prevId !== null) {
      prev = this.lru.get(prevId);
      if (!prev)
        throw new HerdError(404, "invalid_request_error", `Previous response with id '${prevId}' not found.`, "previous_response_not_found", "previous_response_id");
      body.input = [...prev.items, ...asItems(body.input)];
      delete body.previous_response_id;
    }
    const items = asItems(body.input);
    const messages: ChatMsg[] = conversation(body, null);
    const tools = chatTools(body.tools);
    const prompt: PromptInput = { messages: messages as PromptInput["messages"] & object, ...(tools ? { tools } : {}) };
    const sessionId = prev?.root ?? `conv_${crypto.randomUUID().replaceAll("-", "")}`;
    return { body, prompt, sessionId, items, store: body.store !== false };
  }

  /** Wrap the answer so the finished response is stored on its way to the client. */
  tap(answer: Answer<Uint8Array>, p: PreparedResponses): Answer<Uint8Array> {
    if (!p.store) return answer;
    if (answer.kind === "whole") {
      if (answer.status === 200) this.remember(typeof answer.body === "string" ? answer.body : new TextDecoder().decode(answer.body), p, answer.workerId);
      return answer;
    }
    if (answer.kind !== "stream") return answer;
    return { ...answer, body: this.tapStream(answer.body, p, answer.workerId, answer.sse) };
  }

  /** Store a finished response (its JSON text); ignored when it is not one. */
  private remember(json: string, p: PreparedResponses, workerId: string): void {
    let r: unknown;
    try {
      r = JSON.parse(json);
    } catch {
      return;
    }
    if (isObj(r) && isObj(r.response)) r = r.response; // a response.completed event
    if (!isObj(r) || typeof r.id !== "string" || r.object !== "response") return;
    const items = [...p.items, ...outputItems(r.output)];
    this.lru.set(r.id, { items, workerId, root: p.sessionId }, itemsBytes(items));
  }

  private tapStream(src: RelaySource<Uint8Array>, p: PreparedResponses, workerId: string, sse: boolean): RelaySource<Uint8Array> {
    const decoder = new TextDecoder();
    let carry = "";
    let off = false;
    const scan = (bytes: Uint8Array) => {
      if (off) return;
      carry += decoder.decode(bytes, { stream: true });
      if (!sse) {
        if (carry.length > MAX_EVENT_BYTES) off = true;
        return;
      }
      for (let end = carry.indexOf("\n\n"); end >= 0; end = carry.indexOf("\n\n")) {
        const ev = carry.slice(0, end);
        carry = carry.slice(end + 2);
        if (ev.includes("response.completed") || ev.includes("response.incomplete")) {
          const data = ev.split("\n").find((l) => l.startsWith("data:"));
          if (data) this.remember(data.slice(5).trim(), p, workerId);
        }
      }
      if (carry.length > MAX_EVENT_BYTES) off = true;
    };
    return {
      read: (cb: (r: ReadResult<Uint8Array>) => void) =>
        src.read((r) => {
          if (!("error" in r)) {
            if (!r.done) scan(r.value);
            else if (!sse && !off) this.remember(carry, p, workerId);
          }
          cb(r);
        }),
      cancel: () => src.cancel(),
      onStall: (fn) => src.onStall(fn),
    };
  }
}
