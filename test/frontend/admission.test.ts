// Admission: auth, limits, validation, health/liveness and drain, /v1/models.
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { MODEL, chatBody, chatCompletion, post, startHerd, startUpstream, streamingReply, trackForCleanup, until, type Herd } from "./harness.ts";

const track = trackForCleanup();
async function caught(p: PromiseLike<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (e) {
    return e;
  }
  return null;
}
const okUpstream = () => track(startUpstream(() => Response.json(chatCompletion("ok"))));

describe("validation → 400 naming the field", () => {
  const cases: [string, unknown, string | null][] = [
    ["malformed JSON", '{"model": "m1", "messages": [', null],
    ["not an object", "[1,2]", null],
    ["missing model", { messages: [{ role: "user", content: "x" }] }, "model"],
    ["model not a string", { model: 3, messages: [{ role: "user", content: "x" }] }, "model"],
    ["messages not an array", { model: MODEL, messages: "hi" }, "messages"],
    ["empty messages", { model: MODEL, messages: [] }, "messages"],
    ["message without role", { model: MODEL, messages: [{ content: "x" }] }, "messages[0].role"],
    ["stream not boolean", chatBody({ stream: "yes" }), "stream"],
    ["max_tokens not an integer", chatBody({ max_tokens: 1.5 }), "max_tokens"],
    ["max_tokens zero", chatBody({ max_tokens: 0 }), "max_tokens"],
    ["n not an integer", chatBody({ n: "2" }), "n"],
    ["temperature out of range", chatBody({ temperature: 9 }), "temperature"],
  ];
  for (const [name, body, param] of cases) {
    test(name, async () => {
      const up = okUpstream();
      const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
      const res = await post(`${h.url}/v1/chat/completions`, body);
      expect(res.status).toBe(400);
      const j: any = await res.json();
      expect(j.error.type).toBe("invalid_request_error");
      expect(j.error.param).toBe(param);
      expect(up.received.length).toBe(0);
    });
  }

  test("completions prompt is validated", async () => {
    const h = track(await startHerd({ workers: [] }));
    const res = await post(`${h.url}/v1/completions`, { model: MODEL, prompt: [1, "a"] });
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.param).toBe("prompt");
  });

  test("the openai client surfaces a 400 as BadRequestError", async () => {
    const up = okUpstream();
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const c = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: "x", maxRetries: 0 });
    expect(await caught(c.chat.completions.create({ model: MODEL, messages: [], max_tokens: 3 }))).toBeInstanceOf(OpenAI.BadRequestError);
  });
});

describe("limits and auth", () => {
  test("413 from Content-Length and while reading a chunked body", async () => {
    const up = okUpstream();
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }], frontend: { max_body_bytes: 2048 } }));
    const big = JSON.stringify(chatBody({ messages: [{ role: "user", content: "x".repeat(5000) }] }));
    const r1 = await post(`${h.url}/v1/chat/completions`, big);
    expect(r1.status).toBe(413);
    expect(((await r1.json()) as any).error.code).toBe("request_too_large");
    // No Content-Length: a streamed body is cut off at the limit while it is read.
    const bytes = new TextEncoder().encode(big);
    const body = new ReadableStream<Uint8Array>({
      start(ctrl) {
        for (let i = 0; i < bytes.length; i += 512) ctrl.enqueue(bytes.slice(i, i + 512));
        ctrl.close();
      },
    });
    const r2 = await fetch(`${h.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
    expect(r2.status).toBe(413);
    expect(up.received.length).toBe(0);
  });

  test("API keys: 401 in OpenAI shape without a valid Bearer key; the key is never echoed", async () => {
    const up = okUpstream();
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }], frontend: { api_keys: ["sk-secret-1", "sk-secret-2"] } }));
    const none = await post(`${h.url}/v1/chat/completions`, chatBody());
    expect(none.status).toBe(401);
    const j: any = await none.json();
    expect(j.error.type).toBe("authentication_error");
    const wrong = await post(`${h.url}/v1/chat/completions`, chatBody(), { authorization: "Bearer sk-secret-" });
    expect(wrong.status).toBe(401);
    expect(await wrong.text()).not.toContain("sk-secret");
    expect((await fetch(`${h.url}/v1/models`)).status).toBe(401);
    const c = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: "sk-secret-2", maxRetries: 0 });
    expect((await c.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }] })).choices[0]!.message.content).toBe("ok");
    const bad = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: "nope", maxRetries: 0 });
    expect(await caught(bad.models.list())).toBeInstanceOf(OpenAI.AuthenticationError);
    // The upstream never sees the client's key.
    expect(up.received[0]!.headers.get("authorization")).toBeNull();
  });

  test("max_in_flight → 429 while the limit is taken, admitted again after", async () => {
    const up = track(startUpstream(() => streamingReply({ tokens: 1000, gapMs: 10 })));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }], frontend: { max_in_flight: 1 } }));
    const ac = new AbortController();
    const res = await fetch(`${h.url}/v1/chat/completions`, { method: "POST", body: JSON.stringify(chatBody({ stream: true })), signal: ac.signal });
    await res.body!.getReader().read();
    const r2 = await post(`${h.url}/v1/chat/completions`, chatBody());
    expect(r2.status).toBe(429);
    expect(r2.headers.get("retry-after")).toBe("1");
    expect(((await r2.json()) as any).error.type).toBe("rate_limit_error");
    ac.abort();
    await until(() => h.frontend.inFlightCount === 0, 2000, "slot freed");
  });

  test("unknown model → 404; known model without a ready worker → 503 with Retry-After", async () => {
    const h = track(await startHerd({ workers: [{ id: "w0", url: "http://127.0.0.1:9", state: "starting" }] }));
    const r1 = await post(`${h.url}/v1/chat/completions`, chatBody({ model: "nope" }));
    expect(r1.status).toBe(404);
    expect(((await r1.json()) as any).error.code).toBe("model_not_found");
    const r2 = await post(`${h.url}/v1/chat/completions`, chatBody());
    expect(r2.status).toBe(503);
    expect(r2.headers.get("retry-after")).not.toBeNull();
    expect(((await r2.json()) as any).error.code).toBe("no_worker_available");
  });

  test("upstream 4xx is relayed as the engine said it, not retried", async () => {
    const a = track(startUpstream(() => Response.json({ error: { message: "max_tokens too large", type: "BadRequestError", code: 400 } }, { status: 400 })));
    const b = okUpstream();
    const h = track(await startHerd({ workers: [{ id: "a", url: a.url }, { id: "b", url: b.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(400);
    expect(((await res.json()) as any).error.message).toBe("max_tokens too large");
    expect(b.received.length).toBe(0);
  });
});

describe("health, models, drain", () => {
  test("/health follows readiness, /livez stays 200, /v1/models lists ready models", async () => {
    const up = track(startUpstream(() => streamingReply({ tokens: 5, gapMs: 30 })));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url, state: "starting" }] }));
    expect((await fetch(`${h.url}/health`)).status).toBe(503);
    expect(((await (await fetch(`${h.url}/v1/models`)).json()) as any).data).toEqual([]);
    h.registry.setState("w0", "ready");
    expect((await fetch(`${h.url}/health`)).status).toBe(200);
    const models = await new OpenAI({ baseURL: `${h.url}/v1`, apiKey: "x" }).models.list();
    expect(models.data.map((m) => m.id)).toEqual([MODEL]);
    const oa = new OpenAI({ baseURL: `${h.url}/v1`, apiKey: "x", maxRetries: 0 });
    expect((await oa.models.retrieve(MODEL)).id).toBe(MODEL);
    expect(await caught(oa.models.retrieve("nope"))).toBeInstanceOf(OpenAI.NotFoundError);

    // Drain: an admitted stream finishes; new requests get 503 + Retry-After; /livez stays 200.
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    const pending = res.text();
    await until(() => h.frontend.inFlightCount === 1, 2000, "stream admitted");
    h.frontend.startDrain();
    const health = await fetch(`${h.url}/health`);
    expect(health.status).toBe(503);
    expect(((await health.json()) as any).status).toBe("draining");
    expect((await fetch(`${h.url}/livez`)).status).toBe(200);
    const refused = await post(`${h.url}/v1/chat/completions`, chatBody());
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe("1");
    expect(await h.frontend.waitIdle(3000)).toBe(true);
    expect(await pending).toContain("[DONE]");
  });

  test("abortAll after the drain bound ends open streams with an error event", async () => {
    const up = track(startUpstream(() => streamingReply({ tokens: 1000, gapMs: 20 })));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    const pending = res.text();
    await until(() => h.frontend.inFlightCount === 1, 2000, "stream admitted");
    h.frontend.startDrain();
    expect(await h.frontend.waitIdle(50)).toBe(false);
    h.frontend.abortAll();
    const text = await pending;
    expect(text.trim().split("\n\n").at(-1)).toContain('"code":"upstream_shutdown"');
    expect(await h.frontend.waitIdle(1000)).toBe(true);
  });

  test("unknown routes answer an OpenAI-shaped 404", async () => {
    const h = track(await startHerd({ workers: [] }));
    const res = await fetch(`${h.url}/v1/nope`);
    expect(res.status).toBe(404);
    expect(((await res.json()) as any).error.type).toBe("not_found_error");
  });
});
