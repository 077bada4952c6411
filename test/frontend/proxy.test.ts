// Frontend relay behaviour against fake upstreams, driven by the official openai client and raw fetch.
import { describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { MODEL, chatBody, chatCompletion, post, startHerd, startUpstream, streamingReply, trackForCleanup, until, type Herd } from "./harness.ts";

const track = trackForCleanup();
const client = (h: Herd, extra: Partial<ConstructorParameters<typeof OpenAI>[0]> = {}) =>
  new OpenAI({ baseURL: `${h.url}/v1`, apiKey: "unused", maxRetries: 0, ...extra });

describe("relay", () => {
  test("non-streaming chat through the openai client", async () => {
    const up = track(startUpstream(() => Response.json(chatCompletion("hi there"))));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const r = await client(h).chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], max_tokens: 4 });
    expect(r.choices[0]!.message.content).toBe("hi there");
    expect(up.received[0]!.path).toBe("/v1/chat/completions");
    expect(h.registry.get("w0")!.load.in_flight).toBe(0);
    expect(h.frontend.inFlightCount).toBe(0);
  });

  test("streaming chat is relayed chunk by chunk, not buffered", async () => {
    const up = track(startUpstream(() => streamingReply({ tokens: 6, gapMs: 40 })));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const stream = await client(h).chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], stream: true });
    const arrivals: number[] = [];
    let text = "";
    for await (const chunk of stream) {
      arrivals.push(performance.now());
      text += chunk.choices[0]?.delta.content ?? "";
    }
    expect(text).toBe("t1 t2 t3 t4 t5 t6 ");
    // 7 chunks 40 ms apart upstream: a buffering proxy would deliver them all at once.
    expect(arrivals.length).toBe(7);
    expect(arrivals.at(-1)! - arrivals[0]!).toBeGreaterThan(150);
    const text2 = await h.metrics.render();
    expect(text2).toMatch(/herd_time_to_first_token_seconds_count\{model="m1"\} 1/);
    expect(text2).toMatch(/herd_requests_total\{model="m1",worker="w0",status="200"\} 1/);
  });

  test("backpressure: a client that stops reading stops herd reading from the engine", async () => {
    // 40k chunks of ~1 KiB = ~40 MiB. Loopback socket buffers (two hops) and the fetch client hold
    // ~10 MiB between them here; a proxy that buffered would read all of it.
    const TOTAL = 40_000;
    let produced = 0;
    const pad = "x".repeat(1000);
    const up = track(
      startUpstream(
        () =>
          new Response(
            new ReadableStream<Uint8Array>({
              pull(ctrl) {
                if (produced === TOTAL) {
                  ctrl.enqueue(new TextEncoder().encode("data: [DONE]\n\n"));
                  ctrl.close();
                  return;
                }
                produced++;
                ctrl.enqueue(new TextEncoder().encode(`data: {"choices":[{"index":0,"delta":{"content":"${pad}"},"finish_reason":null}]}\n\n`));
              },
            }),
            { headers: { "content-type": "text/event-stream" } },
          ),
      ),
    );
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    const reader = res.body!.getReader();
    await reader.read();
    await Bun.sleep(400); // the client reads nothing for a while
    const producedWhilePaused = produced;
    if (process.env.HERD_TEST_VERBOSE) console.log(`produced while paused: ${producedWhilePaused}/${TOTAL}`);
    expect(producedWhilePaused).toBeLessThan(TOTAL / 2);
    // Reading resumes and everything arrives.
    let bytes = 0;
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      bytes += r.value.byteLength;
    }
    expect(produced).toBe(TOTAL);
    expect(bytes).toBeGreaterThan(TOTAL * 1000);
  });

  test("completions endpoint goes to the same path upstream", async () => {
    const up = track(
      startUpstream(() => Response.json({ id: "c", object: "text_completion", created: 1, model: MODEL, choices: [{ index: 0, text: "ok", finish_reason: "stop", logprobs: null }] })),
    );
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const r = await client(h).completions.create({ model: MODEL, prompt: "say", max_tokens: 2 });
    expect(r.choices[0]!.text).toBe("ok");
    expect(up.received[0]!.path).toBe("/v1/completions");
  });

  test("client disconnect aborts the upstream request and releases the lease", async () => {
    let cancelled = 0;
    const up = track(startUpstream(() => streamingReply({ tokens: 1000, gapMs: 20, onCancel: () => cancelled++ })));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const ac = new AbortController();
    const res = await fetch(`${h.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(chatBody({ stream: true })),
      signal: ac.signal,
    });
    const reader = res.body!.getReader();
    await reader.read();
    await reader.read();
    expect(h.registry.get("w0")!.load.in_flight).toBe(1);
    const t0 = performance.now();
    ac.abort();
    await until(() => cancelled > 0 || up.aborted > 0, 2000, "upstream abort");
    const abortMs = performance.now() - t0;
    expect(abortMs).toBeLessThan(1500); // the upstream would stream for 20 s; slack for a loaded CI box
    await until(() => h.registry.get("w0")!.load.in_flight === 0 && h.frontend.inFlightCount === 0, 2000, "in-flight back to 0");
    expect(await h.metrics.render()).toMatch(/herd_client_aborts_total\{model="m1",phase="streaming"\} 1/);
  });

  test("internal fields are stripped before forwarding", async () => {
    const up = track(startUpstream(() => Response.json(chatCompletion("ok"))));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const res = await post(
      `${h.url}/v1/chat/completions`,
      chatBody({ kv_transfer_params: { remote_host: "10.9.9.9" }, bootstrap_host: "10.9.9.9", bootstrap_port: 1, bootstrap_room: 2, prefill_url: "http://evil", target_host: "x", chat_template: "{{x}}", temperature: 0.5 }),
      { "x-prefiller-host-port": "10.9.9.9:80" },
    );
    expect(res.status).toBe(200);
    const got = up.received[0]!;
    for (const k of ["kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room", "prefill_url", "target_host", "chat_template"])
      expect(got.body).not.toHaveProperty(k);
    expect(got.body.temperature).toBe(0.5);
    expect(got.headers.get("x-prefiller-host-port")).toBeNull();
  });
});

describe("failures", () => {
  test("refused connection before the first byte is retried on another worker", async () => {
    const dead = startUpstream(() => new Response("x"));
    const deadUrl = dead.url;
    await dead.stop();
    const up = track(startUpstream(() => Response.json(chatCompletion("from b"))));
    const h = track(await startHerd({ workers: [{ id: "a", url: deadUrl }, { id: "b", url: up.url }] }));
    for (let i = 0; i < 2; i++) {
      const r = await client(h).chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }] });
      expect(r.choices[0]!.message.content).toBe("from b");
    }
    // The first attempt on a is refused and retried on b; that refusal ejects a (router.outlier),
    // so the second request goes straight to b: one retry, not two.
    expect(await h.metrics.render()).toMatch(/herd_retries_total\{model="m1",reason="connect"\} 1\n/);
    expect(h.registry.get("a")!.load.in_flight).toBe(0);
  });

  test("5xx before the first byte is retried; a stream is retried if it breaks before its first chunk", async () => {
    const bad = track(startUpstream(() => new Response("overloaded", { status: 503 })));
    const good = track(startUpstream(() => streamingReply({ tokens: 2 })));
    const h = track(await startHerd({ workers: [{ id: "a", url: bad.url }, { id: "b", url: good.url }] }));
    const stream = await client(h).chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], stream: true });
    let text = "";
    for await (const c of stream) text += c.choices[0]?.delta.content ?? "";
    expect(text).toBe("t1 t2 ");
    expect(bad.received.length).toBe(1);
  });

  test("a stream reset after the headers but before its first chunk is retried elsewhere", async () => {
    const resetting = track(
      startUpstream(
        () =>
          new Response(
            new ReadableStream({
              async pull(ctrl) {
                await Bun.sleep(5);
                ctrl.error(new Error("engine died before its first token"));
              },
            }),
            { headers: { "content-type": "text/event-stream" } },
          ),
      ),
    );
    const good = track(startUpstream(() => streamingReply({ tokens: 3 })));
    const h = track(await startHerd({ workers: [{ id: "a", url: resetting.url }, { id: "b", url: good.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get("x-herd-worker")).toBe("b");
    expect(await res.text()).toContain("[DONE]");
    expect(resetting.received.length).toBe(1);
    // Bun.serve may hold the headers until the first chunk, so the fetch itself can fail ("connect").
    expect(await h.metrics.render()).toMatch(/herd_retries_total\{model="m1",reason="(connect|reset|eof)"\} 1/);
  });

  test("headers sent, then the connection drops before any chunk: retried elsewhere (raw socket engine)", async () => {
    // A raw TCP "engine": answers 200 with chunked SSE headers, then closes without a body.
    const raw = Bun.listen({
      hostname: "127.0.0.1",
      port: 0,
      socket: {
        data(sock) {
          sock.write("HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n");
          setTimeout(() => sock.end(), 10);
        },
      },
    });
    track({ stop: () => raw.stop(true) });
    const good = track(startUpstream(() => streamingReply({ tokens: 2 })));
    const h = track(await startHerd({ workers: [{ id: "a", url: `http://127.0.0.1:${raw.port}` }, { id: "b", url: good.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    expect(res.headers.get("x-herd-worker")).toBe("b");
    expect(await res.text()).toContain("[DONE]");
    expect(await h.metrics.render()).toMatch(/herd_retries_total\{model="m1",reason="(reset|eof)"\} 1/);
  });

  test("a failure with no other worker becomes a 502 OpenAI error", async () => {
    const bad = track(startUpstream(() => new Response("boom", { status: 500 })));
    const h = track(await startHerd({ workers: [{ id: "a", url: bad.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody());
    expect(res.status).toBe(502);
    const j: any = await res.json();
    expect(j.error.type).toBe("server_error");
    expect(j.error.code).toBe("upstream_status_5xx");
    expect(j.error.message).toContain("HTTP 500");
  });

  test("engine dies mid-stream, migration off: error event then close, no retry after the first byte", async () => {
    const dying = track(startUpstream(() => streamingReply({ tokens: 10, dieAfter: 3, gapMs: 5 })));
    const other = track(startUpstream(() => streamingReply({ tokens: 10 })));
    const h = track(await startHerd({ workers: [{ id: "a", url: dying.url }, { id: "b", url: other.url }], frontend: { migration_limit: 0 } }));
    // round-robin starts at a
    const stream = await client(h).chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], stream: true });
    let text = "";
    let error: any = null;
    try {
      for await (const c of stream) text += c.choices[0]?.delta.content ?? "";
    } catch (e) {
      error = e;
    }
    expect(text).toBe("t1 t2 t3 ");
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(String(error.message)).toContain("engine connection lost");
    expect(other.received.length).toBe(0);
    await until(() => h.registry.get("a")!.load.in_flight === 0, 2000, "lease released");
  });

  test("engine dies mid-stream, migration on: the text so far goes to another worker as the message to continue", async () => {
    const dying = track(startUpstream(() => streamingReply({ tokens: 10, dieAfter: 3, gapMs: 5 })));
    const other = track(startUpstream(() => streamingReply({ tokens: 4 })));
    const h = track(await startHerd({ workers: [{ id: "a", url: dying.url }, { id: "b", url: other.url }] }));
    const stream = await client(h).chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "x" }], stream: true, max_tokens: 10 });
    let text = "";
    const ids = new Set<string>();
    for await (const c of stream) {
      text += c.choices[0]?.delta.content ?? "";
      ids.add(c.id);
    }
    expect(text.startsWith("t1 t2 t3 ")).toBe(true); // then whatever b continues with; no error event
    expect(ids.size).toBe(1); // one id for the client, whatever b calls its stream
    expect(other.received.length).toBe(1);
    const sent = other.received[0]!.body;
    expect(sent.messages.at(-1)).toEqual({ role: "assistant", content: "t1 t2 t3 " });
    expect(sent.continue_final_message).toBe(true);
    expect(sent.add_generation_prompt).toBe(false);
    expect(sent.max_tokens).toBe(7);
    expect(await h.metrics.render()).toMatch(/herd_migrations_total\{model="m1",reason="reset",result="migrated"\} 1/);
  });

  test("EOF without [DONE] is reported as an error event, never a clean end", async () => {
    const up = track(startUpstream(() => streamingReply({ tokens: 10, dieAfter: 2, mode: "eof" })));
    const h = track(await startHerd({ workers: [{ id: "a", url: up.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    const text = await res.text();
    const events = text.trim().split("\n\n");
    expect(events.at(-1)).toStartWith('data: {"error":');
    expect(JSON.parse(events.at(-1)!.slice(6)).error.code).toBe("upstream_eof");
    expect(text).not.toContain("[DONE]");
  });

  test("first-token timeout: a silent upstream gets a 504 before anything was sent", async () => {
    const up = track(startUpstream(() => new Response(new ReadableStream({ pull: () => Bun.sleep(5000) }), { headers: { "content-type": "text/event-stream" } })));
    const h = track(await startHerd({ workers: [{ id: "a", url: up.url }], frontend: { first_token_timeout_ms: 150 } }));
    const t0 = performance.now();
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    expect(res.status).toBe(504);
    expect(performance.now() - t0).toBeLessThan(1500);
    expect(((await res.json()) as any).error.code).toBe("upstream_timeout");
    await until(() => up.aborted > 0, 2000, "upstream aborted");
  });

  test("idle timeout after the first token ends the stream with an error event", async () => {
    let n = 0;
    const up = track(
      startUpstream(
        () =>
          new Response(
            new ReadableStream<Uint8Array>({
              async pull(ctrl) {
                if (n++ < 2) ctrl.enqueue(new TextEncoder().encode(`data: ${JSON.stringify({ choices: [{ index: 0, delta: { content: "a" }, finish_reason: null }] })}\n\n`));
                else await Bun.sleep(5000);
              },
            }),
            { headers: { "content-type": "text/event-stream" } },
          ),
      ),
    );
    const h = track(await startHerd({ workers: [{ id: "a", url: up.url }], frontend: { idle_timeout_ms: 150 } }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    const text = await res.text();
    expect(text.trim().split("\n\n").at(-1)).toContain('"code":"upstream_idle_timeout"');
  });

  test("a worker leaving rotation aborts its open streams with an error event", async () => {
    const up = track(startUpstream(() => streamingReply({ tokens: 1000, gapMs: 20 })));
    const h = track(await startHerd({ workers: [{ id: "a", url: up.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    const reader = res.body!.getReader();
    await reader.read();
    h.registry.setState("a", "failed");
    let text = "";
    for (;;) {
      const r = await reader.read();
      if (r.done) break;
      text += new TextDecoder().decode(r.value);
    }
    expect(text.trim().split("\n\n").at(-1)).toContain('"code":"upstream_worker_down"');
  });
});
