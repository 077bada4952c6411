// Issue 10 over real sockets: a body that never arrives holds no slot and gets 408 (connection
// closed) within frontend.body_timeout_ms; a client that hangs up mid-upload is client_closed, not
// a 500 with an error line; an over-long declared Content-Length gets an OpenAI 413; the text a
// client sees for an upstream failure is herd's, never the runtime's.
import { describe, expect, test } from "bun:test";
import { connect, type Socket } from "node:net";
import { chatBody, chatCompletion, post, startHerd, startUpstream, streamingReply, trackForCleanup, until } from "./harness.ts";

const track = trackForCleanup();

/** A raw client: sends `text`, collects what comes back; `closed` resolves when the server closes. */
function rawClient(url: string, text: string): { sock: Socket; received: () => string; closed: Promise<void> } {
  const { hostname, port } = new URL(url);
  let out = "";
  const sock = connect(Number(port), hostname, () => sock.write(text));
  sock.on("data", (d) => (out += d.toString()));
  const closed = new Promise<void>((resolve) => sock.on("close", () => resolve()));
  sock.on("error", () => {});
  track({ stop: () => sock.destroy() });
  return { sock, received: () => out, closed };
}

const halfBody = (contentLength: number, sent: string) =>
  `POST /v1/chat/completions HTTP/1.1\r\nHost: herd\r\nContent-Type: application/json\r\nContent-Length: ${contentLength}\r\n\r\n${sent}`;

describe("bodies and client-side failures", () => {
  test("a half-sent body holds no slot, does not hold the drain, and gets an OpenAI 408 with the connection closed", async () => {
    const up = track(startUpstream(() => Response.json(chatCompletion("ok"))));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }], frontend: { max_in_flight: 1, body_timeout_ms: 400 } }));
    const slow = rawClient(h.url, halfBody(500, '{"model":"m1","mess'));
    await Bun.sleep(50);
    // The only slot is free for a real request while the half body hangs.
    const ok = await post(`${h.url}/v1/chat/completions`, chatBody());
    expect(ok.status).toBe(200);
    expect(h.frontend.inFlightCount).toBe(0);
    expect(await h.frontend.waitIdle(10)).toBe(true);
    await Promise.race([slow.closed, Bun.sleep(5000)]);
    const answer = slow.received();
    expect(answer).toStartWith("HTTP/1.1 408");
    expect(answer).toContain('"code":"body_timeout"');
    expect(slow.sock.destroyed || slow.sock.readableEnded).toBe(true);
    expect(await h.metrics.render()).toContain('herd_rejected_requests_total{reason="body_timeout"} 1');
  });

  test("a client that hangs up mid-upload is client_closed: no 5xx, no error line", async () => {
    const up = track(startUpstream(() => Response.json(chatCompletion("ok"))));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }] }));
    const c = rawClient(h.url, halfBody(1000, '{"model":"m1"'));
    await Bun.sleep(50);
    c.sock.destroy();
    await until(() => h.log.lines.some((l) => l.includes("during the upload")), 3000, "upload hang-up seen");
    const m = await h.metrics.render();
    expect(m).toContain('herd_client_failures_total{model="unknown",outcome="client_closed",phase="upload"} 1');
    expect(m).not.toMatch(/herd_requests_total\{[^}]*status="5\d\d"/);
    expect(h.log.lines.filter((l) => /"level":"error"|\berror\b.*request failed/.test(l))).toEqual([]);
    expect(up.received.length).toBe(0);
  });

  test("a declared Content-Length over twice the body limit gets an OpenAI 413, not the runtime's empty one", async () => {
    const up = track(startUpstream(() => Response.json(chatCompletion("ok"))));
    const h = track(await startHerd({ workers: [{ id: "w0", url: up.url }], frontend: { max_body_bytes: 2048 } }));
    const c = rawClient(h.url, halfBody(10_000_000, "{}"));
    await Promise.race([c.closed, Bun.sleep(3000)]);
    expect(c.received()).toStartWith("HTTP/1.1 413");
    expect(c.received()).toContain('"code":"request_too_large"');
  });

  test("the error text a client sees is herd's: no runtime hint mid-stream, none in a 502", async () => {
    const dying = track(startUpstream(() => streamingReply({ tokens: 5, gapMs: 20, dieAfter: 2, mode: "reset" })));
    const h = track(await startHerd({ workers: [{ id: "a", url: dying.url }] }));
    const res = await post(`${h.url}/v1/chat/completions`, chatBody({ stream: true }));
    const text = await res.text();
    const event = text.split("\n\n").find((e) => e.startsWith('data: {"error"'))!;
    const err = JSON.parse(event.slice("data: ".length)).error;
    expect(err.message).toBe("engine connection lost");
    expect(text).not.toContain("verbose");

    const h2 = track(await startHerd({ workers: [{ id: "gone", url: "http://127.0.0.1:9" }] }));
    const r2 = await post(`${h2.url}/v1/chat/completions`, chatBody());
    expect(r2.status).toBe(502);
    expect(((await r2.json()) as any).error.message).toBe("upstream worker gone failed: could not connect to the engine");
  });
});
