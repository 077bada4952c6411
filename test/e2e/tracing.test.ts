// Traces across two `herd run` nodes (issue 23), against a real OTLP/HTTP receiver: a tiny Bun.serve
// that takes OTLP JSON at /v1/traces (the nodes export with OTEL_EXPORTER_OTLP_PROTOCOL=http/json,
// configured only by the standard OTEL_* variables plus `tracing.enabled`). Node a has no worker for
// `only-b`, so a request for it entering a is routed to b's worker and forwarded over the peer API.
// Checked: every span continues the caller's trace id on both nodes; a's request span is the
// caller's child, the admission, route and attempt spans are its children, the route carries the
// chosen worker and its cost terms, and b's forward span is the child of a's attempt span; the
// decision record carries the trace id. A request without traceparent starts a new trace.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { cleanup, portBase, startHerd, tempDir, waitFor as waitForLog, type HerdProc } from "../helpers/herd.ts";

interface OtlpSpan {
  traceId: string;
  spanId: string;
  parentSpanId?: string;
  name: string;
  attributes: { key: string; value: Record<string, unknown> }[];
  /** service.instance.id of the resource (the node's name). */
  node: string;
}

const spans: OtlpSpan[] = [];
let receiver: ReturnType<typeof Bun.serve> | null = null;
let dir = "";
let base = 0;
const nodes = new Map<string, HerdProc>();
const url = (n: "a" | "b") => `http://127.0.0.1:${base + (n === "a" ? 0 : 1)}`;
const logs = () => [...nodes].map(([n, h]) => `--- ${n} ---\n${h.log().slice(-2500)}`).join("\n");
const waitFor = <T>(what: string, fn: () => Promise<T | null | undefined | false>, timeoutMs = 30_000) => waitForLog(what, fn, timeoutMs, logs);
const attr = (s: OtlpSpan, key: string): unknown => {
  const v = s.attributes.find((a) => a.key === key)?.value;
  return v === undefined ? undefined : (v.stringValue ?? v.intValue ?? v.doubleValue ?? v.boolValue);
};
const hex = (n: number) => Array.from(crypto.getRandomValues(new Uint8Array(n)), (b) => b.toString(16).padStart(2, "0")).join("");

/** The OTLP/HTTP JSON receiver: ExportTraceServiceRequest in, an empty ExportTraceServiceResponse out. */
function startReceiver(): void {
  receiver = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      if (req.method !== "POST" || new URL(req.url).pathname !== "/v1/traces") return new Response("not found", { status: 404 });
      if (!(req.headers.get("content-type") ?? "").includes("application/json")) return new Response("want OTLP JSON", { status: 415 });
      const body = (await req.json()) as { resourceSpans: { resource: { attributes: OtlpSpan["attributes"] }; scopeSpans: { spans: Omit<OtlpSpan, "node">[] }[] }[] };
      for (const rs of body.resourceSpans) {
        const node = String(rs.resource.attributes.find((a) => a.key === "service.instance.id")?.value.stringValue ?? "");
        for (const ss of rs.scopeSpans) for (const s of ss.spans) spans.push({ ...s, attributes: s.attributes ?? [], node });
      }
      return Response.json({});
    },
  });
}

function config(n: "a" | "b"): string {
  const model = n === "a" ? "shared" : "only-b";
  return `node: { name: ${n}, data_dir: ${JSON.stringify(join(dir, n, "data"))} }
frontend: { first_token_timeout_ms: 10000, idle_timeout_ms: 5000, drain_timeout_ms: 1000 }
supervisor: { port_range_start: ${base + 100 + 100 * (n === "a" ? 0 : 1)}, health_interval_ms: 100, health_timeout_ms: 300 }
models:
  - { name: shared }
  - { name: only-b }
engines:
  - { kind: sim, model: ${model}, count: 1, args: ["--time-scale", "10"] }
cluster:
  discovery: file
  token: e2e-tracing-token
  file: { dir: ${JSON.stringify(join(dir, "shared"))} }
tracing: { enabled: true }
`;
}

describe("traces across two herd run nodes (OTLP/HTTP JSON receiver)", () => {
  beforeAll(async () => {
    startReceiver();
    base = portBase();
    dir = tempDir("herd-tracing-e2e-");
    const env = {
      OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver!.port}`,
      OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
      OTEL_SERVICE_NAME: "herd-e2e",
      OTEL_BSP_SCHEDULE_DELAY: "100",
    };
    await Promise.all(
      (["a", "b"] as const).map(async (n) => {
        mkdirSync(join(dir, n));
        nodes.set(n, await startHerd(join(dir, n), config(n), { args: ["--listen", `127.0.0.1:${base + (n === "a" ? 0 : 1)}`], env, readyTimeoutMs: 40_000 }));
      }),
    );
    await waitFor("a pools b's worker", async () => {
      const ws = ((await (await fetch(`${url("a")}/admin/cluster`)).json()) as { workers: { model: string; state: string }[] }).workers;
      return ws.some((w) => w.model === "only-b" && w.state === "ready");
    });
  }, 90_000);

  afterAll(async () => {
    await Promise.all([...nodes.values()].map((h) => h.stop(5_000)));
    receiver?.stop(true);
    if (dir) cleanup(dir);
  });

  test("a request entering a and served on b continues the caller's trace on both nodes, parent/child links right", async () => {
    const traceId = hex(16);
    const callerSpan = hex(8);
    const res = await fetch(`${url("a")}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", traceparent: `00-${traceId}-${callerSpan}-01` },
      body: JSON.stringify({ model: "only-b", messages: [{ role: "user", content: "trace me across nodes" }], max_tokens: 8, stream: true }),
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("[DONE]");
    const ours = () => spans.filter((s) => s.traceId === traceId);
    const find = (node: string, name: string) => ours().find((s) => s.node === node && s.name === name);
    await waitFor("spans of both nodes at the receiver", async () => find("a", "herd.request") && find("a", "herd.attempt") && find("b", "herd.forward"), 15_000);

    const request = find("a", "herd.request")!;
    expect(request.parentSpanId).toBe(callerSpan); // continued, not a new root (llm-d's bug)
    expect(attr(request, "herd.outcome")).toBe("complete");
    for (const name of ["herd.admission", "herd.route", "herd.attempt"]) expect(find("a", name)?.parentSpanId).toBe(request.spanId);
    const route = find("a", "herd.route")!;
    expect(String(attr(route, "herd.worker"))).toStartWith("b");
    expect(attr(route, "herd.worker_node")).toBe("b");
    expect(route.attributes.some((a) => a.key.startsWith("herd.term."))).toBe(true);
    const attempt = find("a", "herd.attempt")!;
    expect(attr(attempt, "herd.worker")).toBe(attr(route, "herd.worker"));
    const forward = find("b", "herd.forward")!;
    expect(forward.parentSpanId).toBe(attempt.spanId); // the remote hop is the attempt's child, on b
    expect(attr(forward, "herd.origin")).toBe("a");
    expect(attr(forward, "http.response.status_code")).toBe(200);
    // Every span of this request, on both nodes, is in the caller's trace.
    expect(new Set(ours().map((s) => s.node))).toEqual(new Set(["a", "b"]));
    // The decision record names the trace: from "which decision" to its spans.
    const recs = ((await (await fetch(`${url("a")}/admin/requests?since=0`)).json()) as { records: { model: string; trace_id?: string }[] }).records;
    expect(recs.find((r) => r.model === "only-b")?.trace_id).toBe(traceId);
  }, 40_000);

  test("without a traceparent a request starts a new trace (a root span)", async () => {
    const before = new Set(spans.map((s) => s.traceId));
    const res = await fetch(`${url("a")}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": "untraced-1" },
      body: JSON.stringify({ model: "shared", messages: [{ role: "user", content: "no parent" }], max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
    await res.text();
    const root = await waitFor("the new trace's root span", async () => spans.find((s) => s.name === "herd.request" && s.node === "a" && !before.has(s.traceId)), 15_000);
    expect(root.parentSpanId ?? "").toBe("");
    expect(root.traceId).toMatch(/^[0-9a-f]{32}$/);
  }, 30_000);
});
