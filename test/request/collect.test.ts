// Non-streaming requests migrate (src/request/collect.ts): herd asks the engine for a stream,
// accumulates it through the MigratingSource, and answers one chat.completion. Lifecycle level on a
// virtual clock: the first engine resets mid-generation, the second continues the text so far.
import { describe, expect, test } from "bun:test";
import { ChatAssembler, collectable, streamedLeg } from "../../src/request/collect.ts";
import { HttpUpstream } from "../../src/request/http-upstream.ts";
import type { Leg } from "../../src/request/plan.ts";
import { MODEL, virtualHerd } from "../frontend/virtual-harness.ts";

const enc = new TextEncoder();
const chunk = (id: string, delta: Record<string, unknown>, finish: string | null = null) =>
  `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 1700000000, model: MODEL, choices: [{ index: 0, delta, logprobs: null, finish_reason: finish, ...(finish ? { stop_reason: null } : {}) }] })}\n\n`;
const usage = (id: string, prompt: number, completion: number) =>
  `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 1700000000, model: MODEL, choices: [], usage: { prompt_tokens: prompt, total_tokens: prompt + completion, completion_tokens: completion, prompt_tokens_details: null } })}\n\n`;
/** An SSE body that sends `events`, then ends (or errors, as a killed engine's connection does). */
function sse(events: string[], fail: boolean): Response {
  const queue = [...events];
  return new Response(new ReadableStream({
    pull(c) {
      const n = queue.shift();
      if (n !== undefined) c.enqueue(enc.encode(n));
      else if (fail) c.error(new Error("connection reset"));
      else c.close();
    },
  }), { headers: { "content-type": "text/event-stream" } });
}
const tokens = (from: number, to: number) => Array.from({ length: to - from }, (_, i) => `w${from + i} `);
const ask = { model: MODEL, messages: [{ role: "user", content: "q" }], max_tokens: 10 };

describe("non-streaming migration", () => {
  test("an engine dying mid-generation: the answer continues on another worker, one chat.completion", async () => {
    const bodies: any[] = [];
    const fakeFetch = async (_url: string, init: RequestInit): Promise<Response> => {
      const b = JSON.parse(String(init.body));
      bodies.push(b);
      if (bodies.length === 1) return sse([chunk("chatcmpl-first", { role: "assistant", content: "" }), ...tokens(0, 4).map((t) => chunk("chatcmpl-first", { content: t }))], true);
      const left = b.max_tokens as number;
      const id = "chatcmpl-second";
      return sse([chunk(id, { role: "assistant", content: "" }), ...tokens(4, 4 + left).map((t, i) => chunk(id, { content: t }, i === left - 1 ? "length" : null)), usage(id, 7 + 4, left), "data: [DONE]\n\n"], false);
    };
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), frontend: { migration_limit: 3, migration_collect_min_tokens: 0 } });
    const res = await h.drive(h.fetch("/v1/chat/completions", ask));
    expect(res.status).toBe(200);
    const out = (await h.drive(res.json())) as any;
    expect(bodies[0]).toMatchObject({ stream: true, stream_options: { include_usage: true }, max_tokens: 10 });
    expect(bodies[1]).toMatchObject({ stream: true, continue_final_message: true, add_generation_prompt: false, max_tokens: 6 });
    expect(bodies[1].messages.at(-1)).toEqual({ role: "assistant", content: tokens(0, 4).join("") });
    expect(out.id).toBe("chatcmpl-first");
    expect(out.object).toBe("chat.completion");
    expect(out.choices[0].message).toMatchObject({ role: "assistant", content: tokens(0, 10).join(""), tool_calls: [] });
    expect(out.choices[0].finish_reason).toBe("length");
    expect(out.usage).toMatchObject({ prompt_tokens: 7, completion_tokens: 10, total_tokens: 17 });
    // vLLM's non-streamed field set (src/engine/sim/openai.ts fullResponse).
    expect(Object.keys(out).sort()).toEqual(["choices", "created", "id", "kv_transfer_params", "model", "object", "prompt_logprobs", "service_tier", "system_fingerprint", "usage"]);
    expect(await h.metrics.render()).toMatch(/herd_migrations_total\{model="m1",reason="reset",result="migrated"\} 1/);
    expect(h.frontend.inFlightCount).toBe(0);
    for (const w of h.registry.list()) expect(w.load.in_flight).toBe(0);
  });

  test("no other worker: a clean 502, never a truncated document", async () => {
    const fakeFetch = async () => sse([chunk("chatcmpl-x", { role: "assistant", content: "" }), chunk("chatcmpl-x", { content: "a" })], true);
    const h = virtualHerd({ workers: 1, upstream: () => new HttpUpstream(fakeFetch), frontend: { migration_limit: 3, migration_collect_min_tokens: 10 } });
    const res = await h.drive(h.fetch("/v1/chat/completions", ask));
    expect(res.status).toBe(502);
    expect(((await h.drive(res.json())) as any).error.code).toBe("upstream_reset");
    expect(h.frontend.inFlightCount).toBe(0);
  });

  test("requests migration cannot replay, and migration_limit 0, go to the engine unstreamed; a JSON answer is relayed as is", async () => {
    const bodies: any[] = [];
    const fakeFetch = async (_url: string, init: RequestInit) => {
      bodies.push(JSON.parse(String(init.body)));
      return Response.json({ id: "chatcmpl-j", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }], usage: { prompt_tokens: 1, completion_tokens: 1, total_tokens: 2 } });
    };
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), frontend: { migration_limit: 3, migration_collect_min_tokens: 0 } });
    for (const extra of [{ logprobs: true }, { n: 2 }, { response_format: { type: "json_object" } }]) {
      const res = await h.drive(h.fetch("/v1/chat/completions", { ...ask, ...extra }));
      expect(res.status).toBe(200);
      expect(bodies.at(-1).stream).toBeUndefined();
    }
    // Collected, but the engine ignored `stream` and answered JSON: relayed as it said it.
    const res = await h.drive(h.fetch("/v1/chat/completions", ask));
    expect(bodies.at(-1).stream).toBe(true);
    expect(((await h.drive(res.json())) as any).id).toBe("chatcmpl-j");
    const off = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), frontend: { migration_limit: 0 } });
    await off.drive(off.fetch("/v1/chat/completions", ask));
    expect(bodies.at(-1).stream).toBeUndefined();
  });

  test("below migration_collect_min_tokens the request goes unstreamed; an engine dying before its answer is re-run whole elsewhere", async () => {
    const bodies: any[] = [];
    const fakeFetch = async (_url: string, init: RequestInit) => {
      bodies.push(JSON.parse(String(init.body)));
      // The first engine dies before answering (a non-streamed answer's head comes at the end).
      if (bodies.length === 1) throw new Error("socket closed");
      return Response.json({ id: "chatcmpl-r", object: "chat.completion", choices: [{ index: 0, message: { role: "assistant", content: "whole" }, finish_reason: "length" }], usage: { prompt_tokens: 1, completion_tokens: 10, total_tokens: 11 } });
    };
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), frontend: { migration_limit: 3, migration_collect_min_tokens: 11 } });
    const res = await h.drive(h.fetch("/v1/chat/completions", ask));
    expect(res.status).toBe(200);
    expect(((await h.drive(res.json())) as any).choices[0].message.content).toBe("whole");
    expect(bodies).toHaveLength(2);
    for (const b of bodies) expect(b.stream).toBeUndefined();
    // Without max_tokens the answer may run to the context length: collected whatever the threshold.
    await h.drive(h.fetch("/v1/chat/completions", { model: MODEL, messages: ask.messages }));
    expect(bodies.at(-1).stream).toBe(true);
    // At the threshold: collected.
    await h.drive(h.fetch("/v1/chat/completions", { ...ask, max_tokens: 11 }));
    expect(bodies.at(-1).stream).toBe(true);
    expect(h.frontend.inFlightCount).toBe(0);
  });
});

describe("collect.ts", () => {
  const leg = (body: Record<string, unknown>, over: Partial<Leg> = {}): Leg => ({
    name: "main", route: { model: "m", sessionId: null, promptTokens: 1 }, endpoint: "chat", body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "x" }], ...body }), stream: false, maxTokens: 10, ...over,
  });
  test("collectable: non-streamed replayable chat only", () => {
    expect(collectable(leg({}))).toBe(true);
    expect(collectable(leg({}, { stream: true }))).toBe(false);
    expect(collectable(leg({}, { endpoint: "completions" }))).toBe(false);
    expect(collectable(leg({ tools: [{ type: "function" }] }))).toBe(false);
    expect(collectable(leg({ stream_options: { include_usage: true } }))).toBe(false);
    expect(JSON.parse(streamedLeg(leg({})).body)).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });
  test("the assembler joins deltas split across chunks and keeps the last finish_reason and usage", () => {
    const a = new ChatAssembler();
    const text = chunk("c1", { role: "assistant", content: "" }) + chunk("c1", { content: "he" }) + chunk("c1", { content: "llo" }, "stop") + usage("c1", 3, 2) + "data: [DONE]\n\n";
    const bytes = enc.encode(text);
    for (let i = 0; i < bytes.length; i += 7) a.push(bytes.slice(i, i + 7));
    const r = a.result(5) as any;
    expect(r).toMatchObject({ id: "c1", created: 1700000000, choices: [{ message: { content: "hello" }, finish_reason: "stop", stop_reason: null }], usage: { completion_tokens: 2 } });
    expect(a.error).toBeNull();
  });
});
