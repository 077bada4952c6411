// An orchestrated plan (P/D): the plan pins each leg to a worker and retries itself; the lifecycle
// runs each leg through the same attempt code. The two rules the P/D failure handling needs: a
// commit-bound timeout comes back to the plan as a failure (not a final 504), and a stream whose
// first event is an error event is a failure before the first token (vLLM's
// kv_load_failure_policy fail answers 200 + `data: {"error": …}`). Virtual clock, no sockets.
import { describe, expect, test } from "bun:test";
import { HttpUpstream } from "../../src/request/http-upstream.ts";
import { aggregatedPlan, type Leg, type LegOutcome, type PinnedLeg, type PlanBuilder, type PlanInput, type LegRunner } from "../../src/request/plan.ts";
import { MODEL, virtualHerd } from "../frontend/virtual-harness.ts";

const enc = new TextEncoder();
const sse = (chunks: string[]) =>
  new Response(new ReadableStream({ pull(c) { const n = chunks.shift(); if (n) c.enqueue(enc.encode(n)); else c.close(); } }), { headers: { "content-type": "text/event-stream" } });
const TOKEN = 'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n';

function pinned(runner: LegRunner, workerId: string, base: PinnedLeg): Promise<LegOutcome> {
  return runner.run({ ...base, worker: { id: workerId, url: `http://${workerId}` } }, new AbortController().signal);
}
const legOf = (input: PlanInput): Leg => (aggregatedPlan(input) as { leg: Leg }).leg;

describe("orchestrated plan", () => {
  test("a pinned leg's commit timeout is a failure the plan retries; an error event first is a failure; then a clean stream commits", async () => {
    const ends: LegOutcome[] = [];
    const hosts: string[] = [];
    const fakeFetch = async (url: string, init: RequestInit): Promise<Response> => {
      const host = new URL(url).host;
      hosts.push(host);
      if (host === "sim-0") return new Promise<Response>((_, reject) => init.signal?.addEventListener("abort", () => reject(new Error("aborted")))); // hangs
      if (hosts.filter((h) => h === "sim-1").length === 1) return sse(['data: {"error":{"message":"KV load failed","type":"server_error","code":500}}\n\n', "data: [DONE]\n\n"]);
      return sse([TOKEN, "data: [DONE]\n\n"]);
    };
    const plan: PlanBuilder = (input) => ({
      kind: "orchestrated",
      async run(runner) {
        const base: PinnedLeg = { ...legOf(input), name: "decode", worker: { id: "", url: "" }, toClient: true, commitTimeoutMs: 500 };
        ends.push(await pinned(runner, "sim-0", base));
        ends.push(await pinned(runner, "sim-1", base));
        const last = await pinned(runner, "sim-1", base);
        ends.push(last);
        return last;
      },
    });
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), plan, frontend: { first_token_timeout_ms: 60_000 } });
    const res = await h.drive(h.fetch("/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "q" }], max_tokens: 4, stream: true }));
    expect(res.status).toBe(200);
    const text = await h.drive(res.text());
    expect(text).toContain('"content":"hi"');
    expect(text).not.toContain("KV load failed");
    expect(ends.map((e) => e.kind)).toEqual(["failed", "failed", "committed"]);
    expect(ends[0]).toMatchObject({ reason: "first_token_timeout" });
    expect(h.clock.now()).toBeLessThan(60_000); // the pinned bound (500 ms) ruled, not the frontend's
    expect(h.frontend.inFlightCount).toBe(0);
    for (const w of h.registry.list()) expect(w.load.in_flight).toBe(0);
  });

  test("a plan that ends failed without any answer gives the client herd's 502, and releases everything", async () => {
    const fakeFetch = async (_url: string, _init: RequestInit) => new Response("boom", { status: 500 });
    const plan: PlanBuilder = (input) => ({
      kind: "orchestrated",
      async run(runner) {
        const base: PinnedLeg = { ...legOf(input), name: "prefill", worker: { id: "sim-0", url: "http://sim-0" }, toClient: false, commitTimeoutMs: null };
        return pinned(runner, "sim-0", base);
      },
    });
    const h = virtualHerd({ upstream: () => new HttpUpstream(fakeFetch), plan });
    const res = await h.drive(h.fetch("/v1/chat/completions", { model: MODEL, messages: [{ role: "user", content: "q" }], max_tokens: 4 }));
    expect(res.status).toBe(502);
    expect(((await h.drive(res.json())) as any).error.message).toContain("sim-0");
    expect(h.frontend.inFlightCount).toBe(0);
    for (const w of h.registry.list()) expect(w.load.in_flight).toBe(0);
  });
});
