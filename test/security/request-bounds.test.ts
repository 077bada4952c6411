// Issue 10 item 1: every per-request step whose cost grows with the input has a cap with a clear
// OpenAI 400 — messages (frontend.max_messages), prompt characters (frontend.max_prompt_chars),
// JSON values and nesting before the body is parsed on the event loop (frontend.max_json_values,
// json-scan.ts; inline for small bodies, on a helper thread for large ones), and prompt tokens
// against the model's max_model_len — and nothing reaches an engine when refused.
import { expect, test } from "bun:test";
import { SharedPreprocessor } from "../../src/preprocess/shared.ts";
import { MODEL, chatBody, chatCompletion, post, startHerd, startUpstream, trackForCleanup } from "../frontend/harness.ts";

const track = trackForCleanup();

async function refused(url: string, body: unknown): Promise<{ status: number; code: string; param: string | null; type: string }> {
  const res = await post(`${url}/v1/chat/completions`, body);
  const j = (await res.json()) as { error: { code: string; param: string | null; type: string } };
  return { status: res.status, code: j.error?.code, param: j.error?.param, type: j.error?.type };
}

test("caps: messages, prompt characters, JSON values and depth — 400 before any engine sees it", async () => {
  const up = track(startUpstream(() => Response.json(chatCompletion("ok"))));
  const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }], frontend: { max_messages: 10, max_prompt_chars: 1000, max_json_values: 2048 } }));
  const msgs = (n: number, content = "w") => Array.from({ length: n }, () => ({ role: "user", content }));
  expect((await post(`${h.url}/v1/chat/completions`, chatBody({ messages: msgs(10) }))).status).toBe(200);
  expect(await refused(h.url, chatBody({ messages: msgs(11) }))).toMatchObject({ status: 400, code: "array_above_max_length", param: "messages", type: "invalid_request_error" });
  expect(await refused(h.url, chatBody({ messages: msgs(2, "x".repeat(501)) }))).toMatchObject({ status: 400, code: "prompt_too_long", param: "messages" });
  const deep = `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"extra":${"[".repeat(65)}${"]".repeat(65)}}`;
  expect(await refused(h.url, deep)).toMatchObject({ status: 400, code: "json_too_deep" });
  // Small body: scanned inline; > 256 KiB: scanned on the helper thread. Same answer either way.
  expect(await refused(h.url, chatBody({ extra: Array.from({ length: 3000 }, () => 0) }))).toMatchObject({ status: 400, code: "json_too_large" });
  expect(await refused(h.url, chatBody({ extra: Array.from({ length: 3000 }, () => "y".repeat(100)) }))).toMatchObject({ status: 400, code: "json_too_large" });
  expect((await post(`${h.url}/v1/chat/completions`, chatBody({ extra: "z".repeat(300_000) }))).status).toBe(200);
  const completions = await post(`${h.url}/v1/completions`, { model: MODEL, prompt: "p".repeat(1001) });
  expect(completions.status).toBe(400);
  expect(((await completions.json()) as { error: { code: string } }).error.code).toBe("prompt_too_long");
  expect(up.received.length).toBe(2);
}, 30_000);

test("a prompt longer than the model's max_model_len is a 400 context_length_exceeded (kv policy)", async () => {
  const up = track(startUpstream(() => Response.json(chatCompletion("ok"))));
  const prompts = new SharedPreprocessor([{ name: MODEL, tokenizer: "", block_size: 16, max_model_len: 64 }], { workers: 1 });
  try {
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }], policy: "kv", prompts }));
    expect((await post(`${h.url}/v1/chat/completions`, chatBody())).status).toBe(200);
    expect(await refused(h.url, chatBody({ messages: [{ role: "user", content: "word ".repeat(100) }] }))).toMatchObject({ status: 400, code: "context_length_exceeded", param: "messages" });
    const many = Array.from({ length: 100 }, () => ({ role: "user", content: "w" }));
    expect(await refused(h.url, chatBody({ messages: many }))).toMatchObject({ status: 400, code: "context_length_exceeded" });
    expect(up.received.length).toBe(1);
  } finally {
    prompts.close();
  }
}, 30_000);

test("bytes of bodies being read at once stay under frontend.max_body_bytes_in_flight (503, then free again)", async () => {
  const up = track(startUpstream(() => Response.json(chatCompletion("ok"))));
  const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }], frontend: { max_body_bytes: 64 * 1024, max_body_bytes_in_flight: 100 * 1024 } }));
  // A client that sends 60 KiB of a body and then waits: its bytes are held while it is read.
  let release: () => void = () => {};
  const gate = new Promise<void>((r) => (release = r));
  const head = new TextEncoder().encode(`{"model":"${MODEL}","messages":[{"role":"user","content":"${"a".repeat(60 * 1024)}`);
  const slow = fetch(`${h.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: new ReadableStream<Uint8Array>({
      async start(ctl) {
        ctl.enqueue(head);
        await gate;
        ctl.enqueue(new TextEncoder().encode(`"}],"max_tokens":1}`));
        ctl.close();
      },
    }),
  });
  const held = (h.frontend as unknown as { json: { bodyBytesInFlight: number } }).json;
  for (let i = 0; i < 200 && held.bodyBytesInFlight < 60 * 1024; i++) await Bun.sleep(10);
  expect(held.bodyBytesInFlight).toBeGreaterThanOrEqual(60 * 1024);
  const second = await post(`${h.url}/v1/chat/completions`, chatBody({ messages: [{ role: "user", content: "b".repeat(50 * 1024) }] }));
  expect(second.status).toBe(503);
  expect(second.headers.get("retry-after")).toBe("1");
  expect(((await second.json()) as { error: { code: string } }).error.code).toBe("bodies_over_budget");
  expect((await post(`${h.url}/v1/chat/completions`, chatBody())).status).toBe(200); // small ones still fit
  release();
  expect((await slow).status).toBe(200);
  expect(held.bodyBytesInFlight).toBe(0);
  expect((await post(`${h.url}/v1/chat/completions`, chatBody({ messages: [{ role: "user", content: "b".repeat(50 * 1024) }] }))).status).toBe(200);
}, 30_000);
