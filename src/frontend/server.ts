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
import type { Server } from "bun";
import { tooLarge } from "../http/body.ts";
import type { Frontend } from "./app.ts";
import { errorResponse } from "./respond.ts";

export interface Listening {
  server: Server<undefined>;
  /** e.g. http://127.0.0.1:8000 */
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

/** Split "HOST:PORT" / "[::1]:PORT". */
export function parseListen(listen: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(listen) ?? /^([^:]+):(\d+)$/.exec(listen);
  if (!m) throw new Error(`invalid listen address ${JSON.stringify(listen)} (expected HOST:PORT)`);
  return { host: m[1]!, port: Number(m[2]) };
}

export function listen(frontend: Frontend, host: string, port: number, maxBodyBytes: number): Listening {
  const app = frontend.app;
  const backstop = bodyBackstopBytes(maxBodyBytes);
  const server = Bun.serve({
    hostname: host,
    port,
    idleTimeout: IDLE_TIMEOUT_S,
    // Bodies are read by herd under frontend.max_body_bytes (http/body.ts) on every route that reads one.
    maxRequestBodySize: Number.MAX_SAFE_INTEGER,
    fetch(req, srv) {
      const declared = Number(req.headers.get("content-length") ?? 0);
      if (declared > backstop) return errorResponse(tooLarge(maxBodyBytes), { connection: "close" });
      if (req.method === "POST" && req.url.includes("/v1/")) srv.timeout(req, 0);
      return app.fetch(req, { ip: srv.requestIP(req)?.address ?? null });
    },
  });
  const h = host.includes(":") ? `[${host}]` : host;
  return {
    server,
    url: `http://${h}:${server.port}`,
    host,
    port: server.port ?? port,
    stop: (force = false) => server.stop(force),
  };
}
