// Issue 22, row 11: a request whose Host Bun cannot turn into a URL (malformed, or absent from an
// HTTP/1.0 client) answered 500 "internal error" on every route with one error line each. Now: a
// malformed Host is an OpenAI-shaped 400 (RFC 9112 §3.2), logged at most once per interval with a
// count; HTTP/1.0 without Host is served with the listener's own address as the authority.
import { afterAll, beforeAll, expect, test } from "bun:test";
import { connect } from "node:net";
import { MODEL, chatCompletion, startHerd, startUpstream, type Herd, type Upstream } from "../frontend/harness.ts";

let up: Upstream;
let h: Herd;
beforeAll(async () => {
  up = startUpstream(() => Response.json(chatCompletion("ok")));
  h = await startHerd({ workers: [{ id: "w0", url: up.url }] });
});
afterAll(async () => {
  await h?.stop();
  await up?.stop();
});

/** One raw request; resolves with the status code and body once the server closes or 2 s pass. */
function raw(text: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve) => {
    const c = connect(h.listening.port, "127.0.0.1", () => c.write(text));
    let buf = "";
    const done = () => {
      const [head = "", ...rest] = buf.split("\r\n\r\n");
      resolve({ status: Number(head.split(" ")[1] ?? 0), body: rest.join("\r\n\r\n") });
    };
    c.on("data", (d) => (buf += d));
    c.on("close", done);
    setTimeout(() => (c.destroy(), done()), 2000);
  });
}

test("malformed Host: 400 invalid_host on every route, /health included; one log line for many", async () => {
  for (const host of ["a b", "x:99999", "%", "[::", "a/b", "a@b"])
    for (const path of ["/health", "/livez", "/v1/models", "/admin/status", "/nope"]) {
      const r = await raw(`GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
      expect({ host, path, status: r.status }).toEqual({ host, path, status: 400 });
      expect(JSON.parse(r.body.replace(/^[0-9a-f]+\r\n|\r\n0\r\n\r\n$/g, "")).error.code).toBe("invalid_host");
    }
  expect(h.log.lines.filter((l) => l.includes("internal error") || l.includes("unhandled error")).length).toBe(0);
  expect(h.log.lines.filter((l) => l.includes("request refused: malformed Host header")).length).toBe(1);
});

test("HTTP/1.0 without Host is served (the listener's address stands in), POST bodies included", async () => {
  const live = await raw("GET /livez HTTP/1.0\r\n\r\n");
  expect(live.status).toBe(200);
  const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] });
  const r = await raw(`POST /v1/chat/completions HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
  expect(r.status).toBe(200);
  expect(JSON.parse(r.body).choices[0].message.content).toBe("ok");
});
