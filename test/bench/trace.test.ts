import { describe, expect, test } from "bun:test";
import { BenchInputError, plan } from "../../src/workload/plan.ts";
import { MOONCAKE_BLOCK_TOKENS, parseTrace, toJsonl } from "../../src/workload/trace.ts";
import { DEFAULTS } from "../../src/workload/workloads.ts";

const words = (s: string) => s.split(" ");

describe("herd trace format", () => {
  test("round-trips: plan → JSONL → parse gives the same requests (chat and prompt)", () => {
    for (const w of [{ ...DEFAULTS["multi-turn"], system_tokens: 10, user_tokens: 5, output: 4 }, { ...DEFAULTS.fixed, input: 20 }] as const) {
      const reqs = [...plan(w, { kind: "poisson", rate: 3 }, { requests: 30, duration_s: null }, 11)];
      const text = toJsonl(reqs);
      expect(text.split("\n").filter(Boolean).length).toBe(30);
      expect(parseTrace(text)).toEqual(reqs);
      expect(toJsonl(parseTrace(text))).toBe(text);
    }
  });

  test("sorted by timestamp (stable), defaults for session and timestamp, blank lines skipped", () => {
    const t = parseTrace(
      [
        `{"timestamp": 2, "session": "b", "prompt": "two", "max_tokens": 5}`,
        ``,
        `{"prompt": "zero", "max_tokens": 1}`,
        `{"timestamp": 2, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}`,
      ].join("\n"),
    );
    expect(t.map((r) => [r.at_s, r.session, r.prompt ?? r.messages![0]!.content])).toEqual([[0, "line-3", "zero"], [2, "b", "two"], [2, "line-4", "hi"]]);
  });

  test("bad lines are typed errors naming the line", () => {
    const cases = [
      `{"prompt": "x"}`, // no max_tokens
      `{"prompt": "x", "messages": [{"role":"user","content":"y"}], "max_tokens": 1}`, // both
      `{"max_tokens": 1}`, // neither
      `{"messages": [], "max_tokens": 1}`,
      `{"prompt": "x", "max_tokens": 0}`,
      `{"timestamp": -1, "prompt": "x", "max_tokens": 1}`,
      `not json`,
      `[1,2]`,
      `{"input_length": 10, "output_length": 2, "hash_ids": ["a"]}`,
    ];
    for (const line of cases) {
      expect(() => parseTrace(`{"prompt":"ok","max_tokens":1}\n${line}`, "t.jsonl")).toThrow(BenchInputError);
      expect(() => parseTrace(`{"prompt":"ok","max_tokens":1}\n${line}`, "t.jsonl")).toThrow(/t\.jsonl:2/);
    }
  });
});

describe("Mooncake trace layout", () => {
  // The first lines of Mooncake's published mooncake_trace.jsonl layout (as quoted in NVIDIA Dynamo's
  // benchmarks/data_generator/README.md): timestamp in ms, hash_ids of 512-token blocks.
  const sample = [
    `{"timestamp": 0, "input_length": 6755, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}`,
    `{"timestamp": 0, "input_length": 7319, "output_length": 490, "hash_ids": [0, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27]}`,
    `{"timestamp": 3052, "input_length": 7234, "output_length": 794, "hash_ids": [0, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41]}`,
    `{"timestamp": 3052, "input_length": 2287, "output_length": 316, "hash_ids": [0, 42, 43, 44, 45]}`,
  ].join("\n");

  test("lengths in words = input_length, ms → s, output_length → max_tokens", () => {
    const t = parseTrace(sample);
    expect(t.map((r) => words(r.prompt!).length)).toEqual([6755, 7319, 7234, 2287]);
    expect(t.map((r) => r.at_s)).toEqual([0, 0, 3.052, 3.052]);
    expect(t.map((r) => r.max_tokens)).toEqual([500, 490, 794, 316]);
    expect(t.every((r) => r.messages === undefined)).toBe(true);
  });

  test("identical hash ids give identical text: shared block 0, nothing more", () => {
    const t = parseTrace(sample).map((r) => words(r.prompt!));
    const block0 = t[0]!.slice(0, MOONCAKE_BLOCK_TOKENS).join(" ");
    for (const w of t) expect(w.slice(0, MOONCAKE_BLOCK_TOKENS).join(" ")).toBe(block0);
    expect(t[1]!.slice(MOONCAKE_BLOCK_TOKENS, 2 * MOONCAKE_BLOCK_TOKENS).join(" ")).not.toBe(t[0]!.slice(MOONCAKE_BLOCK_TOKENS, 2 * MOONCAKE_BLOCK_TOKENS).join(" "));
  });

  test("a partial last block is the start of the same id's full block; parsing is the same in any file", () => {
    const a = parseTrace(`{"timestamp": 0, "input_length": 700, "output_length": 1, "hash_ids": [5, 9]}`)[0]!;
    const b = parseTrace(`{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [5, 9]}`)[0]!;
    expect(words(a.prompt!).length).toBe(700);
    expect(words(b.prompt!).slice(0, 700)).toEqual(words(a.prompt!));
    // input_length beyond the ids: the rest is unique filler of the right length
    const c = parseTrace(`{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [5], "session_id": "conv_0"}`)[0]!;
    expect(words(c.prompt!).length).toBe(600);
    expect(c.session).toBe("conv_0");
  });
});
