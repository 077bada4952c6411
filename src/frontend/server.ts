// The Bun.serve shell around the hono app: it supplies the remote address (for the admin API's
// loopback rule) and lifts Bun's idle timeout for inference requests, whose responses may be silent
// for a long time (a non-streaming answer arrives only when generation ends). herd's own bounds
// replace it: frontend.body_timeout_ms for the upload (app.ts), first-token/idle timeouts and
// worker health for the answer.
//
// The body-size backstop is checked here, not by Bun: Bun answers a declared Content-Length over
// its maxRequestBodySize with an empty 413 before any handler runs (issue 10), so Bun's own cap is
// set out of the way and an over-long declaration gets an OpenAI-shaped 413. (A non-numeric
// Content-Length is still refused by Bun's HTTP parser with an empty 400: no handler sees it.)
//
// A request whose Host Bun cannot make a URL of (`Host: a b`, `Host: x:99999`, or none at all from
// an HTTP/1.0 client: req.url is then just the path) made every route, /health included, throw in
// `new URL` and answer 500 with one error line each (issue 22, row 11). RFC 9112 §3.2: a Host with
// an invalid value is a 400, and HTTP/1.0 may omit it, in which case the listener's own address is
// the authority. The Host header itself is passed on untouched (the admin API's loopback rule reads it).
//
// With frontend.tls the same listener speaks only TLS (Bun.serve's `tls` option, src/http/tls-files.ts):
// a plain-HTTP client on that port fails its handshake; there is no second, cleartext port.
import type { Server } from "bun";
import { HerdError } from "../core/errors.ts";
import { tooLarge } from "../http/body.ts";
import { serverTls, type ListenerTls } from "../http/tls-files.ts";
import type { Frontend } from "./app.ts";
import type { Endpoint } from "../protocol/openai.ts";
import { errorResponse } from "./respond.ts";

export interface Listening {
  server: Server<undefined>;
  /** e.g. http://127.0.0.1:8000 (https:// with frontend.tls) */
  url: string;
  host: string;
  port: number;
  /** Stop accepting connections; `force` also closes open ones. */
  stop(force?: boolean): Promise<void>;
}

/** Bun's keep-alive idle timeout for everything that is not an inference request, in seconds. */
const IDLE_TIMEOUT_S = 120;

/** Bun's own request-body cap for a given frontend.max_body_bytes (fixed when the listener starts). */
export function bodyBackstopBytes(maxBodyBytes: number): number {
  return Math.max(maxBodyBytes * 2, 1 << 20);
}

const badHost = () => new HerdError(400, "invalid_request_error", "malformed Host header (RFC 9112 §3.2)", "invalid_host");

/** The two inference routes dispatched without hono: hono's routes, matched the same way (exact path, any query). */
const DIRECT: ReadonlyMap<string, Endpoint> = new Map<string, Endpoint>([
  ["/v1/chat/completions", "chat"],
  ["/v1/completions", "completions"],
]);

/** The endpoint of an absolute URL whose path is one of DIRECT's, else null. */
export function direct(url: string): Endpoint | null {
  // "scheme://authority/path?query": the path starts at the first "/" after "//".
  const start = url.indexOf("/", url.indexOf("//") + 2);
  if (start < 0) return null;
  const q = url.indexOf("?", start);
  const h = url.indexOf("#", start);
  const end = q >= 0 ? q : h >= 0 ? h : url.length;
  return DIRECT.get(url.slice(start, end)) ?? null;
}

/** Split "HOST:PORT" / "[::1]:PORT". */
export function parseListen(listen: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(listen) ?? /^([^:]+):(\d+)$/.exec(listen);
  if (!m) throw new Error(`invalid listen address ${JSON.stringify(listen)} (expected HOST:PORT)`);
  return { host: m[1]!, port: Number(m[2]) };
}

export function listen(frontend: Frontend, host: string, port: number, maxBodyBytes: number, tls: ListenerTls | null = null): Listening {
  const app = frontend.app;
  const backstop = bodyBackstopBytes(maxBodyBytes);
  const unhandled = (e: unknown): Response => frontend.unhandled(e); // (one closure, not one per request)
  const server = Bun.serve({
    hostname: host,
    port,
    idleTimeout: IDLE_TIMEOUT_S,
    // Bodies are read by herd under frontend.max_body_bytes (http/body.ts) on every route that reads one.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    ...(tls ? { tls: serverTls(tls) } : {}),
    fetch(req, srv): Response | Promise<Response> {
      const declared = Number(req.headers.get("content-length") ?? 0);
      if (declared > backstop) return errorResponse(tooLarge(maxBodyBytes), { connection: "close" });
      const url = req.url; // (a getter that builds the string: read once)
      const post = req.method === "POST";
      if (post && url.includes("/v1/")) srv.timeout(req, 0);
      const absolute = URL.canParse(url);
      if (post && absolute) {
        // Chat and completions skip hono (its context, router and middleware chain) and the remote
        // address (only /metrics and the admin API read it); every other route goes through hono.
        const endpoint = direct(url);
        if (endpoint !== null) return frontend.inference(req, endpoint).catch(unhandled);
      }
      const ip = srv.requestIP(req)?.address ?? null;
      if (absolute) return app.fetch(req, { ip });
      const host = req.headers.get("host");
      if (host === null && url.startsWith("/")) return app.fetch(new Request(`${base()}${url}`, req), { ip });
      frontend.refused("malformed Host header", { host: JSON.stringify(host ?? "").slice(0, 80), remote: ip ?? "unknown" });
      return errorResponse(badHost(), { connection: "close" });
    },
  });
  const h = host.includes(":") ? `[${host}]` : host;
  const scheme = tls ? "https" : "http";
  const base = (): string => `${scheme}://${h === "0.0.0.0" || h === "[::]" ? "127.0.0.1" : h}:${server.port}`;
  return {
    server,
    url: `${scheme}://${h}:${server.port}`,
    host,
    port: server.port ?? port,
    stop: (force = false) => server.stop(force),
  };
}
