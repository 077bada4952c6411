// A request is a plan. P/D plugs in as an orchestrated plan given to the Frontend: it routes each
// leg through the lifecycle's LegRunner (the router) and runs it there — a prefill leg read whole
// (its answer carries kv_transfer_params, as vLLM's NixlConnector answers with do_remote_decode),
// then a decode leg built from that answer, streamed to the client — and retries legs itself.
// Nothing in src/frontend knows about legs beyond `plan`.
import { describe, expect, test } from "bun:test";
import { HttpUpstream } from "../../src/request/http-upstream.ts";
import type { LegOutcome, PlanBuilder } from "../../src/request/plan.ts";
import { MODEL, virtualHerd } from "../frontend/virtual-harness.ts";

const pdPlan: PlanBuilder = (input) => ({
  kind: "orchestrated",
  async run(runner, _id, signal) {
    const exclude = new Set<string>();
    let last: LegOutcome = { kind: "failed", reason: "no_worker", message: "none", status: 503 };
    for (let attempt = 0; attempt < 2; attempt++) {
      const p = runner.route({ ...input.route, exclude });
      const body = JSON.stringify({ ...input.json, stream: false, max_tokens: 1, kv_transfer_params: { do_remote_decode: true } });
      last = await runner.run({ name: "prefill", route: input.route, endpoint: input.endpoint, stream: false, body, worker: p.worker, toClient: false, commitTimeoutMs: null }, signal);
      if (last.kind === "done") {
        const d = runner.route({ ...input.route, exclude: new Set() });
        const params = JSON.parse(last.text).kv_transfer_params;
        return runner.run({ name: "decode", route: input.route, endpoint: input.endpoint, stream: input.stream, body: JSON.stringify({ ...input.json, kv_transfer_params: params }), worker: d.worker, toClient: true, commitTimeoutMs: null }, signal);
      }
      if (last.kind !== "failed") return last;
      exclude.add(p.worker.id);
    }
    return last;
  },
});

const enc = new TextEncoder();

describe("plan of legs", () => {
  test("a fake two-leg P/D plan runs through the unchanged frontend: prefill answer feeds the decode leg, decode streams", async () => {
    const seen: { url: string; body: any }[] = [];
    const fakeFetch = async (url: string, init: RequestInit): Promise<Response> => {
      const body = JSON.parse(String(init.body));
      seen.push({ url, body });
      if (body.kv_transfer_params?.do_remote_decode) {
        return Response.json({ id: "p", choices: [{ index: 0, message: { role: "assistant", content: "x" }, finish_reason: "length" }], kv_transfer_params: { remote_engine_id: "e1", remote_block_ids: [1, 2, 3] } });
      }
      const chunks = ['data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n', "data: [DONE]\n\n"];
      return new Response(new ReadableStream({ pull(c) { const n = chunks.shift(); if (n) c.enqueue(enc.encode(n)); else c.close(); } }), { headers: { "content-type": "text/event-stream" } });
    };
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), plan: pdPlan });
    const res = await h.drive(h.fetch("/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "q" }], max_tokens: 8, stream: true }));
    expect(res.status).toBe(200);
    const text = await h.drive(res.text());
    expect(text).toContain('"content":"hi"');
    expect(text).toContain("[DONE]");
    expect(seen.map((s) => s.body.kv_transfer_params)).toEqual([{ do_remote_decode: true }, { remote_engine_id: "e1", remote_block_ids: [1, 2, 3] }]);
    expect(seen[0]!.body.stream).toBe(false);
    expect(seen[1]!.body.stream).toBe(true);
    expect(h.frontend.inFlightCount).toBe(0);
    for (const w of h.registry.list()) expect(w.load.in_flight).toBe(0);
  });

  test("a failing prefill leg is retried on another worker before anything reaches the client", async () => {
    let prefills = 0;
    const fakeFetch = async (_url: string, init: RequestInit): Promise<Response> => {
      const body = JSON.parse(String(init.body));
      if (body.kv_transfer_params?.do_remote_decode) {
        if (prefills++ === 0) return new Response("busy", { status: 503 });
        return Response.json({ kv_transfer_params: { remote_engine_id: "e2" } });
      }
      return Response.json({ choices: [{ index: 0, message: { role: "assistant", content: "ok" }, finish_reason: "stop" }] });
    };
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), plan: pdPlan });
    const res = await h.drive(h.fetch("/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "q" }], max_tokens: 8 }));
    expect(res.status).toBe(200);
    expect(((await h.drive(res.json())) as any).choices[0].message.content).toBe("ok");
    expect(prefills).toBe(2);
    expect(h.frontend.inFlightCount).toBe(0);
  });
});
