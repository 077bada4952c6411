// A bare proxy for bench/frontend-ceiling.ts: Bun.serve whose fetch handler forwards each request to
// one engine and returns the answer, with no herd code, so the bench can say how much of herd's gap
// to the direct engine any Bun proxy on this box pays. Two transports to the engine:
//   fetch  — the handler reads the request body, calls fetch() with it (Bun's HTTP client thread,
//            its keep-alive pool) and returns the Response as is (answer body streamed through).
//            herd too sends the engine a whole body, not the client's stream.
//   socket — a pooled keep-alive HTTP/1.1 client over Bun.connect on the main thread: one write of
//            the request, the answer parsed as it arrives (Content-Length or chunked, RFC 9112 §6, §7.1),
//            the body relayed through a ReadableStream; a connection goes back to the pool only after
//            its body ended cleanly. Just enough HTTP/1.1 for the sim engine's answers (bench only).
// Attribution variants of fetch (bench/frontend-ceiling.ts with BENCH_CEILING_VARIANTS=1):
//   fetch-stream — passes the client's body stream (req.body) to fetch instead of the read bytes
//   fetch-json  — also JSON.parse and re-serialize the request body, as herd does to route it
//   fetch-bytes — reads the engine's whole answer (Response.bytes()) and answers a new Response with
//                 it, as herd does for a small non-streamed body (src/request/http-upstream.ts wholeSource)
//   fetch-signal — fetch-bytes plus what herd arms per attempt (docs/benchmarks.md, fifth pass): an
//                 AbortController whose signal fetch gets, a listener on the client's signal, three
//                 timers set and cleared
//   fetch-heap  — first imports herd's daemon modules (src/daemon/node.ts, not run): herd's code in the heap
// Run: bun bench/lib/bare-proxy.ts <fetch|socket|fetch-stream|fetch-json|fetch-bytes|fetch-signal|fetch-heap> <engine-url>  → prints "… listening on URL".
import type { Socket } from "bun";

const mode = process.argv[2];
const engine = new URL(process.argv[3] ?? "");
if (!["fetch", "socket", "fetch-stream", "fetch-json", "fetch-bytes", "fetch-signal", "fetch-heap"].includes(mode ?? "")) throw new Error("usage: bare-proxy.ts <fetch|socket|fetch-stream|fetch-json|fetch-bytes|fetch-signal|fetch-heap> <engine-url>");
if (mode === "fetch-heap") await import("../../src/daemon/node.ts");
const host = engine.hostname;
const port = Number(engine.port);
const origin = `${engine.protocol}//${engine.host}`;

const MAX_IDLE = 256; // idle pooled connections kept (the bench runs ≤ 32 clients)

interface Exchange {
  onHead: (status: number, headers: [string, string][]) => void;
  onData: (b: Uint8Array) => void;
  onEnd: () => void;
  onError: (e: Error) => void;
}
interface Conn {
  sock: Socket<Conn>;
  buf: Buffer;
  phase: "head" | "length" | "chunk-size" | "chunk-data" | "chunk-crlf" | "trailers";
  left: number; // body (length) or chunk bytes still to come
  ex: Exchange | undefined;
  keepAlive: boolean;
}
const idle: Conn[] = [];

function finish(c: Conn) {
  const ex = c.ex!;
  c.ex = undefined;
  c.phase = "head";
  if (c.keepAlive && idle.length < MAX_IDLE) idle.push(c);
  else c.sock.end();
  ex.onEnd();
}

/** Parse as much of c.buf as possible. */
function parse(c: Conn) {
  for (;;) {
    const ex = c.ex;
    if (!ex) return; // bytes with no exchange: ignored (the sim engine sends none)
    if (c.phase === "head") {
      const i = c.buf.indexOf("\r\n\r\n");
      if (i < 0) return;
      const lines = c.buf.subarray(0, i).toString("latin1").split("\r\n");
      c.buf = c.buf.subarray(i + 4);
      const status = Number(lines[0]!.split(" ")[1]);
      const headers: [string, string][] = [];
      let len = -1;
      let chunked = false;
      c.keepAlive = true;
      for (const l of lines.slice(1)) {
        const k = l.indexOf(":");
        const name = l.slice(0, k).trim().toLowerCase();
        const value = l.slice(k + 1).trim();
        if (name === "content-length") len = Number(value);
        else if (name === "transfer-encoding") chunked = value.toLowerCase().includes("chunked");
        else if (name === "connection") c.keepAlive = value.toLowerCase() !== "close";
        else if (name !== "keep-alive" && name !== "date") headers.push([name, value]);
      }
      if (!chunked && len < 0) return fail(c, new Error("bare proxy: body framed by close is not supported"));
      ex.onHead(status, headers);
      if (chunked) c.phase = "chunk-size";
      else if (len === 0) {
        finish(c);
        continue;
      } else ((c.phase = "length"), (c.left = len));
    } else if (c.phase === "length" || c.phase === "chunk-data") {
      if (c.buf.length === 0) return;
      const n = Math.min(c.left, c.buf.length);
      ex.onData(c.buf.subarray(0, n));
      c.buf = c.buf.subarray(n);
      c.left -= n;
      if (c.left > 0) return;
      if (c.phase === "length") finish(c);
      else c.phase = "chunk-crlf";
    } else if (c.phase === "chunk-crlf") {
      if (c.buf.length < 2) return;
      c.buf = c.buf.subarray(2);
      c.phase = "chunk-size";
    } else if (c.phase === "chunk-size") {
      const i = c.buf.indexOf("\r\n");
      if (i < 0) return;
      const size = parseInt(c.buf.subarray(0, i).toString("latin1"), 16);
      c.buf = c.buf.subarray(i + 2);
      if (!Number.isFinite(size)) return fail(c, new Error("bare proxy: bad chunk size"));
      if (size === 0) c.phase = "trailers";
      else ((c.phase = "chunk-data"), (c.left = size));
    } else {
      // trailers: lines until an empty one
      const i = c.buf.indexOf("\r\n");
      if (i < 0) return;
      const empty = i === 0;
      c.buf = c.buf.subarray(i + 2);
      if (empty) finish(c);
    }
  }
}

function fail(c: Conn, e: Error) {
  const ex = c.ex;
  c.ex = undefined;
  c.keepAlive = false;
  const j = idle.indexOf(c);
  if (j >= 0) idle.splice(j, 1);
  c.sock.end();
  ex?.onError(e);
}

async function connect(): Promise<Conn> {
  const c = { buf: Buffer.alloc(0), phase: "head", left: 0, ex: undefined, keepAlive: true } as unknown as Conn;
  c.sock = await Bun.connect<Conn>({
    hostname: host,
    port,
    data: c,
    socket: {
      data(s, d) {
        const conn = s.data;
        conn.buf = Buffer.concat([conn.buf, d]); // a copy: Bun may reuse `d` after this callback
        parse(conn);
      },
      close(s) {
        fail(s.data, new Error("bare proxy: engine closed the connection"));
      },
      error(s, e) {
        fail(s.data, e);
      },
    },
  });
  c.sock.setNoDelay(true);
  return c;
}

async function viaSocket(req: Request): Promise<Response> {
  const body = await req.text();
  const url = new URL(req.url);
  const head = `${req.method} ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${engine.host}\r\ncontent-type: ${req.headers.get("content-type") ?? "application/json"}\r\ncontent-length: ${Buffer.byteLength(body)}\r\n\r\n`;
  const c = idle.pop() ?? (await connect());
  return new Promise<Response>((resolveHead, rejectHead) => {
    let ctl: ReadableStreamDefaultController<Uint8Array> | undefined;
    let headed = false;
    c.ex = {
      onHead(status, headers) {
        headed = true;
        const stream = new ReadableStream<Uint8Array>({ start: (k) => void (ctl = k) }, { highWaterMark: 0 });
        resolveHead(new Response(stream, { status, headers }));
      },
      onData: (b) => ctl!.enqueue(b), // a view of c.buf, which the parser never writes into
      onEnd: () => ctl!.close(),
      onError: (e) => (headed ? ctl!.error(e) : rejectHead(e)),
    };
    c.sock.write(head + body);
  });
}

const server = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  fetch(req) {
    if (mode === "socket") return viaSocket(req);
    const url = new URL(req.url);
    const to = `${origin}${url.pathname}${url.search}`;
    if (mode === "fetch-json")
      return req.json().then((j) => fetch(to, { method: req.method, headers: { "content-type": "application/json" }, body: JSON.stringify(j) }));
    if (mode === "fetch-bytes" || mode === "fetch-signal")
      return req.arrayBuffer().then(async (b) => {
        const ac = mode === "fetch-signal" ? new AbortController() : undefined;
        const onClientAbort = () => ac!.abort(req.signal.reason);
        const timers = ac ? [30_000, 60_000, 600_000].map((ms) => setTimeout(() => ac.abort(new Error("timeout")), ms)) : [];
        if (ac) req.signal.addEventListener("abort", onClientAbort, { once: true });
        const res = await fetch(to, { method: req.method, headers: { "content-type": req.headers.get("content-type") ?? "application/json" }, body: b, ...(ac ? { signal: ac.signal } : {}) });
        for (const t of timers) clearTimeout(t);
        if (ac) req.signal.removeEventListener("abort", onClientAbort);
        const h = new Headers(res.headers);
        h.delete("content-length"); // Bun sets it again for the new body
        return new Response(await res.bytes(), { status: res.status, headers: h });
      });
    if (mode === "fetch-stream") return fetch(to, { method: req.method, headers: req.headers, body: req.body });
    return req.arrayBuffer().then((b) => fetch(to, { method: req.method, headers: { "content-type": req.headers.get("content-type") ?? "application/json" }, body: b }));
  },
});
console.error(`bare proxy (${mode}) listening on http://127.0.0.1:${server.port}`);
