// The request's spans through the tracing seam (src/core/trace.ts), with a recording Tracer (no
// SDK): the tree a routed request and an orchestrated (P/D-shaped) plan produce, which span each
// leg's `traceparent` header names, failed attempts marked, and nothing at all with tracing off.
// Virtual clock, no sockets; test/e2e/tracing.test.ts runs the real SDK across two nodes.
import { describe, expect, test } from "bun:test";
import type { Span, SpanAttrs, Tracer } from "../../src/core/trace.ts";
import { HttpUpstream } from "../../src/request/http-upstream.ts";
import { aggregatedPlan, type Leg, type PinnedLeg, type PlanBuilder } from "../../src/request/plan.ts";
import { MODEL, virtualHerd } from "../frontend/virtual-harness.ts";

interface Rec {
  name: string;
  id: string;
  parent: string | null;
  attrs: SpanAttrs;
  ended: boolean;
  error?: string;
}

function recordingTracer(): Tracer & { spans: Rec[] } {
  const spans: Rec[] = [];
  let n = 0;
  const open = (name: string, parent: string | null, attrs: SpanAttrs = {}): Span => {
    const r: Rec = { name, id: (++n).toString(16).padStart(16, "0"), parent, attrs: { ...attrs }, ended: false };
    spans.push(r);
    return {
      traceparent: `00-${"ab".repeat(16)}-${r.id}-01`,
      recording: true,
      set: (a) => void Object.assign(r.attrs, a),
      child: (c, a) => open(c, r.id, a),
      end(error) {
        if (r.ended) throw new Error(`span ${name} ended twice`);
        r.ended = true;
        if (error !== undefined) r.error = error;
      },
    };
  };
  return { enabled: true, spans, start: (name, tp, attrs) => open(name, tp ? tp.split("-")[2]! : null, attrs), shutdown: async () => {} };
}

const enc = new TextEncoder();
const TOKEN = 'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n';
const stream = () => new Response(new ReadableStream({ start(c) { c.enqueue(enc.encode(TOKEN)); c.enqueue(enc.encode("data: [DONE]\n\n")); c.close(); } }), { headers: { "content-type": "text/event-stream" } });
const CALLER = `00-${"cd".repeat(16)}-00000000000000ff-01`;

describe("request spans", () => {
  test("a routed request: the caller's span is the parent; admission, route (chosen worker, terms) and each attempt are children; a failed attempt is marked and retried", async () => {
    const tracer = recordingTracer();
    const sent: { host: string; traceparent: string | null }[] = [];
    const fakeFetch = async (url: string, init: RequestInit) => {
      const host = new URL(url).host;
      sent.push({ host, traceparent: new Headers(init.headers).get("traceparent") });
      return sent.length === 1 ? new Response("overloaded", { status: 503 }) : stream();
    };
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), tracer });
    const res = await h.drive(h.fetch("/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "q" }], max_tokens: 4, stream: true }, { traceparent: CALLER }));
    expect(res.status).toBe(200);
    await h.drive(res.text());
    const req = tracer.spans.find((s) => s.name === "herd.request")!;
    expect(req.parent).toBe("00000000000000ff");
    expect(req.ended).toBe(true);
    expect(req.attrs["herd.outcome"]).toBe("complete");
    const kids = tracer.spans.filter((s) => s.parent === req.id).map((s) => s.name);
    expect(kids).toEqual(["herd.admission", "herd.route", "herd.attempt", "herd.route", "herd.attempt"]);
    const [r1, r2] = tracer.spans.filter((s) => s.name === "herd.route");
    expect(r1!.attrs["herd.worker"]).toBe(sent[0]!.host);
    expect(r1!.attrs["herd.policy"]).toBe("round-robin");
    expect(r2!.attrs["herd.worker"]).toBe(sent[1]!.host);
    expect(r1!.attrs["herd.worker"]).not.toBe(r2!.attrs["herd.worker"]);
    expect(JSON.parse(String(r1!.attrs["herd.candidates_json"])).length).toBe(2);
    const [a1, a2] = tracer.spans.filter((s) => s.name === "herd.attempt");
    expect(a1!.error).toContain("status_5xx");
    expect(a2!.error).toBeUndefined();
    // Each attempt's own span is what the engine sees as its parent.
    expect(sent.map((s) => s.traceparent?.split("-")[2])).toEqual([a1!.id, a2!.id]);
    expect(tracer.spans.every((s) => s.ended)).toBe(true);
  });

  test("an orchestrated plan: its route and each leg (prefill, decode) are spans under the request, each leg's traceparent sent to its worker", async () => {
    const tracer = recordingTracer();
    const sent = new Map<string, string | null>();
    const fakeFetch = async (url: string, init: RequestInit) => {
      sent.set(new URL(url).host, new Headers(init.headers).get("traceparent"));
      return new URL(url).host === "sim-0" ? Response.json({ choices: [{ text: "" }], kv_transfer_params: {} }) : stream();
    };
    const plan: PlanBuilder = (input) => ({
      kind: "orchestrated",
      async run(runner, _id, signal) {
        const leg = (aggregatedPlan(input) as { leg: Leg }).leg;
        const chosen = runner.route({ ...leg.route, exclude: new Set() }, true);
        const pin = (name: string, id: string, toClient: boolean): PinnedLeg => ({ ...leg, name, worker: { id, url: `http://${id}` }, toClient, commitTimeoutMs: null, ...(toClient ? {} : { stream: false }) });
        const pre = await runner.run(pin("prefill", "sim-0", false), signal);
        expect(pre.kind).toBe("done");
        expect(chosen.worker.id).toMatch(/^sim-/);
        return runner.run(pin("decode", "sim-1", true), signal);
      },
    });
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), plan, tracer });
    const res = await h.drive(h.fetch("/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "q" }], max_tokens: 4, stream: true }, { traceparent: CALLER }));
    expect(res.status).toBe(200);
    await h.drive(res.text());
    const req = tracer.spans.find((s) => s.name === "herd.request")!;
    expect(tracer.spans.filter((s) => s.parent === req.id).map((s) => s.name)).toEqual(["herd.admission", "herd.route", "herd.leg.prefill", "herd.leg.decode"]);
    expect(tracer.spans.find((s) => s.name === "herd.route")!.attrs["herd.dry_run"]).toBe(true);
    const pre = tracer.spans.find((s) => s.name === "herd.leg.prefill")!;
    const dec = tracer.spans.find((s) => s.name === "herd.leg.decode")!;
    expect(pre.attrs).toMatchObject({ "herd.leg": "prefill", "herd.worker": "sim-0", "herd.attempt_outcome": "done" });
    expect(dec.attrs).toMatchObject({ "herd.leg": "decode", "herd.worker": "sim-1", "herd.relay_end": "complete" });
    expect(sent.get("sim-0")?.split("-")[2]).toBe(pre.id);
    expect(sent.get("sim-1")?.split("-")[2]).toBe(dec.id);
    expect(tracer.spans.every((s) => s.ended)).toBe(true);
  });

  test("tracing off (no tracer): no traceparent goes to the engine, even when the caller sent one", async () => {
    const headers: (string | null)[] = [];
    const fakeFetch = async (_url: string, init: RequestInit) => {
      headers.push(new Headers(init.headers).get("traceparent"));
      return stream();
    };
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch) });
    const res = await h.drive(h.fetch("/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "q" }], max_tokens: 4, stream: true }, { traceparent: CALLER }));
    await h.drive(res.text());
    expect(headers).toEqual([null]);
  });
});
