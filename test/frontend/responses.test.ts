// POST /v1/responses through herd with the official openai client, streamed and not, both where
// the engine serves it natively (the sim, like vLLM) and where herd translates it to a chat
// completion (an engine kind without it); previous_response_id from herd's store, with the
// follow-ups kept on the worker that served the conversation.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { startSimEngine, type SimEngine } from "../../src/engine/sim/server.ts";
import { MODEL, startHerd, startUpstream, type Herd } from "./harness.ts";

let sims: SimEngine[] = [];
const herds: Herd[] = [];

beforeAll(async () => {
  sims = await Promise.all([0, 1].map((i) => startSimEngine({ port: 0, model: MODEL, zeroDelay: true, hashSeed: BigInt(i + 1), outputLen: 12 })));
});
afterAll(async () => {
  for (const h of herds) await h.stop();
  for (const s of sims) await s.stop();
});

async function herdWith(kind: "sim" | "external", n = 1, policy: "round-robin" | "kv" = "round-robin"): Promise<{ herd: Herd; client: OpenAI }> {
  const herd = await startHerd({ workers: sims.slice(0, n).map((s, i) => ({ id: `w${i}`, url: s.url, kind })), policy });
  herds.push(herd);
  return { herd, client: new OpenAI({ baseURL: `${herd.url}/v1`, apiKey: "none", maxRetries: 0 }) };
}

for (const kind of ["sim", "external"] as const) {
  const how = kind === "sim" ? "native (sim engine serves /v1/responses)" : "translated to chat completions";
  describe(`responses.create, ${how}`, () => {
    test("not streamed: a Response object with output_text and usage", async () => {
      const { client } = await herdWith(kind);
      const r = await client.responses.create({ model: MODEL, instructions: "Be brief.", input: "Say hello", max_output_tokens: 5 });
      expect(r.object).toBe("response");
      expect(r.id).toMatch(/^resp_/);
      expect(r.status).toBe("incomplete"); // length-capped, as OpenAI reports max_output_tokens
      expect(r.incomplete_details?.reason).toBe("max_output_tokens");
      expect(r.output_text.length).toBeGreaterThan(0);
      expect(r.output[0]!.type).toBe("message");
      expect(r.usage?.output_tokens).toBe(5);
      expect(r.usage!.input_tokens).toBeGreaterThan(0);
      expect(r.instructions).toBe("Be brief.");
      const done = await client.responses.create({ model: MODEL, input: [{ role: "user", content: [{ type: "input_text", text: "hi" }] }] });
      expect(done.status).toBe("completed"); // EOS after --output-len tokens
      expect(done.usage?.output_tokens).toBe(12);
    });

    test("streamed: the event types the client expects, deltas adding up to the final text", async () => {
      const { client } = await herdWith(kind);
      const stream = await client.responses.create({ model: MODEL, input: "Tell me a story", stream: true });
      const types: string[] = [];
      let deltas = "";
      let final: OpenAI.Responses.Response | null = null;
      let seq = -1;
      for await (const ev of stream) {
        types.push(ev.type);
        expect(ev.sequence_number).toBe(seq + 1);
        seq = ev.sequence_number;
        if (ev.type === "response.output_text.delta") deltas += ev.delta;
        if (ev.type === "response.completed") final = ev.response;
      }
      expect(types.slice(0, 4)).toEqual(["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]);
      expect(types.slice(-4)).toEqual(["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]);
      expect(types.filter((t) => t === "response.output_text.delta").length).toBeGreaterThan(5); // the EOS step adds no text
      expect(final).not.toBeNull();
      expect(final!.output_text ?? (final!.output[0] as { content: { text: string }[] }).content[0]!.text).toBe(deltas);
      expect(final!.usage?.output_tokens).toBe(12);
    });

    test("previous_response_id: the previous turns go to the engine; unknown id → 404 in OpenAI's shape", async () => {
      const { client } = await herdWith(kind);
      const first = await client.responses.create({ model: MODEL, input: "My name is Ada.", max_output_tokens: 4 });
      const second = await client.responses.create({ model: MODEL, input: "What is my name?", previous_response_id: first.id, max_output_tokens: 4 });
      const alone = await client.responses.create({ model: MODEL, input: "What is my name?", max_output_tokens: 4 });
      // The follow-up's prompt holds the first turn and its answer.
      expect(second.usage!.input_tokens).toBeGreaterThan(alone.usage!.input_tokens + first.usage!.output_tokens);
      // A streamed follow-up of the follow-up is stored too.
      const stream = await client.responses.create({ model: MODEL, input: "And again?", previous_response_id: second.id, stream: true, max_output_tokens: 3 });
      let third: OpenAI.Responses.Response | null = null;
      for await (const ev of stream) if (ev.type === "response.incomplete" || ev.type === "response.completed") third = ev.response;
      expect(third!.usage!.input_tokens).toBeGreaterThan(second.usage!.input_tokens);
      const fourth = await client.responses.create({ model: MODEL, input: "Last.", previous_response_id: third!.id, max_output_tokens: 2 });
      expect(fourth.usage!.input_tokens).toBeGreaterThan(third!.usage!.input_tokens);
      try {
        await client.responses.create({ model: MODEL, input: "x", previous_response_id: "resp_nope" });
        throw new Error("expected a 404");
      } catch (e) {
        expect((e as { status: number }).status).toBe(404);
        expect((e as { code: string }).code).toBe("previous_response_not_found");
        expect((e as { param: string }).param).toBe("previous_response_id");
      }
    });
  });
}

describe("responses routing", () => {
  test("a conversation stays on the worker that served its first turn (session id = conversation id)", async () => {
    const { client } = await herdWith("sim", 2, "kv");
    const workers = new Set<string>();
    for (let conv = 0; conv < 4; conv++) {
      const first = await client.responses.create({ model: MODEL, input: `conversation ${conv}`, max_output_tokens: 2 }).withResponse();
      const home = first.response.headers.get("x-herd-worker")!;
      workers.add(home);
      let prev = first.data.id;
      for (let turn = 0; turn < 4; turn++) {
        const next = await client.responses.create({ model: MODEL, input: `turn ${turn}`, previous_response_id: prev, max_output_tokens: 2 }).withResponse();
        expect(next.response.headers.get("x-herd-worker")).toBe(home);
        prev = next.data.id;
      }
    }
  });

  test("bad bodies are 400s naming the field", async () => {
    const { herd } = await herdWith("sim");
    const post = (body: unknown) => fetch(`${herd.url}/v1/responses`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) });
    for (const [body, param] of [
      [{ model: MODEL }, "input"],
      [{ model: MODEL, input: 3 }, "input"],
      [{ model: MODEL, input: "x", max_output_tokens: 0 }, "max_output_tokens"],
      [{ model: MODEL, input: [{ role: "user", content: 5 }] }, "input[0].content"],
      [{ input: "x" }, "model"],
    ] as const) {
      const r = await post(body);
      expect(r.status).toBe(400);
      expect(((await r.json()) as { error: { param: string } }).error.param).toBe(param);
    }
  });

  test("translated: a mid-stream engine failure is an error the client sees, never a silent end", async () => {
    // An engine without /v1/responses that dies after its first chat chunk.
    const up = startUpstream(() => {
      const enc = new TextEncoder();
      const body = new ReadableStream<Uint8Array>({
        start(c) {
          c.enqueue(enc.encode(`data: ${JSON.stringify({ id: "x", object: "chat.completion.chunk", choices: [{ index: 0, delta: { role: "assistant", content: "Hel" } }] })}\n\n`));
          c.close(); // EOF without [DONE]
        },
      });
      return new Response(body, { headers: { "content-type": "text/event-stream" } });
    });
    const herd = await startHerd({ workers: [{ id: "u0", url: up.url, kind: "external" }] });
    herds.push(herd);
    const client = new OpenAI({ baseURL: `${herd.url}/v1`, apiKey: "none", maxRetries: 0 });
    const stream = await client.responses.create({ model: MODEL, input: "hi", stream: true });
    const types: string[] = [];
    let failed: unknown = null;
    try {
      for await (const ev of stream) types.push(ev.type);
    } catch (e) {
      failed = e;
    }
    expect(types).toContain("response.output_text.delta");
    expect(types).not.toContain("response.completed");
    expect(String((failed as { message?: string })?.message ?? failed)).toContain("closed the stream");
    expect(up.received[0]!.path).toBe("/v1/chat/completions");
    await up.stop();
  });
});

describe("the prompt a Responses request hashes", () => {
  test("instructions + input (and the stored turns) as the chat messages a chat request would send", async () => {
    const { ResponsesStore } = await import("../../src/frontend/responses.ts");
    const { checkResponses } = await import("../../src/protocol/responses.ts");
    const limits = { maxMessages: 100, maxPromptChars: 1e6 };
    const store = new ResponsesStore(1 << 20);
    const p = store.prepare(checkResponses({ model: "alias", instructions: "Be brief.", input: [{ role: "developer", content: "rules" }, { role: "user", content: [{ type: "input_text", text: "Say " }, { type: "input_text", text: "hello" }] }] }, limits), MODEL);
    expect(p.prompt.messages).toEqual([{ role: "system", content: "Be brief." }, { role: "system", content: "rules" }, { role: "user", content: "Say hello" }]);
    expect(p.body.model).toBe(MODEL);
    expect(p.sessionId).toMatch(/^conv_/);
    // A tapped answer is stored; the follow-up inlines it and keeps the conversation id.
    const answer = { id: "resp_1", object: "response", output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "Hello!" }] }] };
    store.tap({ kind: "whole", workerId: "w0", status: 200, contentType: "application/json", body: JSON.stringify(answer) }, p);
    const q = store.prepare(checkResponses({ model: MODEL, input: "again", previous_response_id: "resp_1" }, limits), MODEL);
    expect(q.prompt.messages).toEqual([{ role: "system", content: "rules" }, { role: "user", content: "Say hello" }, { role: "assistant", content: "Hello!" }, { role: "user", content: "again" }]);
    expect(q.body.previous_response_id).toBeUndefined();
    expect(q.sessionId).toBe(p.sessionId);
    // store: false keeps nothing; a zero budget keeps nothing.
    const none = new ResponsesStore(0);
    none.tap({ kind: "whole", workerId: "w0", status: 200, contentType: "application/json", body: JSON.stringify({ ...answer, id: "resp_2" }) }, p);
    expect(none.size).toBe(0);
  });
});
