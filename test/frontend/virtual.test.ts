// The frontend on the virtual clock: the HTTP surface (app.fetch) over sim engines through the
// SimUpstream, no sockets and no sleeping; and the honest accounting of a client that stops reading.
import { describe, expect, test } from "bun:test";
import { MODEL, virtualHerd, type VirtualHerd } from "./virtual-harness.ts";

const chat = (extra: Record<string, unknown> = {}) => ({ model: MODEL, messages: [{ role: "user", content: "hello there" }], max_tokens: 8, stream: true, ...extra });

async function readAll(h: VirtualHerd, res: Response): Promise<string> {
  const reader = res.body!.getReader();
  let text = "";
  const dec = new TextDecoder();
  for (;;) {
    const r = await h.drive(reader.read());
    if (r.done) return text;
    text += dec.decode(r.value);
  }
}

async function run(): Promise<{ text: string; endMs: number; worker: string | null }> {
  const h = virtualHerd();
  const res = await h.drive(h.fetch("/v1/chat/completions", chat(), { "x-request-id": "req-1" }));
  expect(res.status).toBe(200);
  const text = await readAll(h, res);
  expect(h.frontend.inFlightCount).toBe(0);
  for (const w of h.registry.list()) expect(w.load.in_flight).toBe(0);
  return { text, endMs: h.clock.now(), worker: res.headers.get("x-herd-worker") };
}

describe("frontend on the virtual clock", () => {
  test("a streamed chat goes through the lifecycle to a sim engine and back, identically twice", async () => {
    const a = await run();
    const b = await run();
    expect(a.text).toContain('"content":"t0 "');
    expect(a.text).toContain('"content":"t7 "');
    expect(a.text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(a.worker).toBe("sim-0");
    expect(a.endMs).toBeGreaterThan(0);
    expect(b).toEqual(a);
  });

  test("a client that stops reading is client_stalled: never an upstream idle timeout, never a 5xx; the engine request is aborted", async () => {
    const h = virtualHerd({ frontend: { idle_timeout_ms: 5_000 } });
    const res = await h.drive(h.fetch("/v1/chat/completions", chat({ max_tokens: 4000 })));
    const reader = res.body!.getReader();
    const first = await h.drive(reader.read());
    expect(first.done).toBe(false);
    // The reader stops here. The engine keeps generating; herd holds the next chunk for the client.
    await h.advance(4_000);
    expect(h.frontend.inFlightCount).toBe(1);
    await h.advance(2_000);
    expect(h.frontend.inFlightCount).toBe(0);
    for (const w of h.registry.list()) expect(w.load.in_flight).toBe(0);
    expect(h.schedulers.get("sim-0")!.stats().running).toBe(0);
    const m = await h.metrics.render();
    expect(m).toContain('herd_client_failures_total{model="m1",outcome="client_stalled",phase="streaming"} 1');
    expect(m).not.toContain("herd_upstream_errors_total{");
    expect(m).not.toMatch(/herd_requests_total\{[^}]*status="5\d\d"/);
    expect(h.log.lines.join("\n")).not.toContain("upstream failed");
  });
});
