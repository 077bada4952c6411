import { describe, expect, test } from "bun:test";
import { OutputVocabulary, StopMatcher } from "../../../src/engine/sim/output.ts";
import { createFallbackTokenizer } from "../../../src/tokenizer/index.ts";

describe("OutputVocabulary", () => {
  const tok = createFallbackTokenizer();
  const vocab = new OutputVocabulary(tok);
  const take = (seed: number, prompt: number[], n: number, natural = 0) => Array.from({ length: n }, (_, i) => vocab.stream(seed, prompt, natural).token(i));

  test("same seed and prompt give the same tokens; another prompt or seed gives others", () => {
    const a = take(1, [5, 6, 7], 40).map((t) => t.id);
    expect(take(1, [5, 6, 7], 40).map((t) => t.id)).toEqual(a);
    expect(take(1, [5, 6, 8], 40).map((t) => t.id)).not.toEqual(a);
    expect(take(2, [5, 6, 7], 40).map((t) => t.id)).not.toEqual(a);
  });

  test("token texts are exactly the detokenized ids", () => {
    const ts = take(3, [1, 2, 3], 60);
    expect(ts.map((t) => t.text).join("")).toBe(tok.decode(ts.map((t) => t.id)));
  });

  test("EOS comes at the natural length with empty text", () => {
    const s = vocab.stream(0, [1], 5);
    expect(s.token(4)).toEqual({ id: tok.eosTokenIds[0]!, text: "", eos: true });
    expect(s.token(3).eos).toBe(false);
  });

  test("id-only streams (herd simulate) give the same ids for a number[] or a Uint32Array prompt", () => {
    const prompt = Array.from({ length: 3000 }, (_, i) => (i * 7919) % 151_000);
    const full = take(4, prompt, 50, 30);
    for (const p of [prompt, Uint32Array.from(prompt)]) {
      const s = vocab.stream(4, p, 30, false);
      expect(Array.from({ length: 50 }, (_, i) => s.tokenId(i))).toEqual(full.map((t) => t.id));
      expect(Array.from({ length: 50 }, (_, i) => s.isEos(i))).toEqual(full.map((t) => t.eos));
      expect(() => s.token(0)).toThrow();
    }
    // A longer prompt after a short one (the reused hash buffer) still hashes only its own ids.
    expect(take(4, [9, 9], 10).map((t) => t.id)).toEqual(take(4, [9, 9], 10).map((t) => t.id));
    expect(take(4, prompt.slice(0, 2), 10).map((t) => t.id)).not.toEqual(take(4, prompt.slice(0, 3), 10).map((t) => t.id));
  });
});

describe("StopMatcher", () => {
  test("holds back a possible stop prefix while streaming and cuts before the match", () => {
    const m = new StopMatcher(["o w"]);
    expect(m.push("he")).toEqual({ emit: "", stop: null });
    expect(m.push("llo")).toEqual({ emit: "hel", stop: null });
    expect(m.push(" world")).toEqual({ emit: "l", stop: "o w" });
    expect(m.fullText).toBe("hell");
  });

  test("the earliest of several stop strings wins; without a match flush releases the held text", () => {
    const m = new StopMatcher(["zz", "b"]);
    expect(m.push("aab")).toEqual({ emit: "aa", stop: "b" });
    const n = new StopMatcher(["xyz"]);
    expect(n.push("abcxy")).toEqual({ emit: "abc", stop: null });
    expect(n.flush()).toBe("xy");
    expect(new StopMatcher([]).push("free")).toEqual({ emit: "free", stop: null });
  });
});
