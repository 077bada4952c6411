// The peer API's own listener (`cluster.listen`), needed for mutual TLS (tls.ts): the frontend's
// listener serves OpenAI clients, which present no certificate, so client certificates can only be
// demanded on a port of their own. Forwarded legs may be silent for as long as generation takes (a
// non-streaming answer), so Bun's idle timeout is lifted for them as the frontend does for /v1/*.
import type { Server } from "bun";
import { FORWARD_PATH } from "./forward.ts";
import { peerServerTls, type PeerTls } from "./tls.ts";

/** Seconds of silence before Bun closes a keep-alive peer connection (other routes answer at once). */
const IDLE_TIMEOUT_S = 120;

export interface PeerListener {
  port: number;
  stop(): Promise<void>;
}

/** Split "HOST:PORT" / "[::1]:PORT". */
function hostPort(listen: string): { host: string; port: number } {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(listen) ?? /^([^:]+):(\d+)$/.exec(listen);
  if (!m) throw new Error(`cluster.listen: expected HOST:PORT, got ${JSON.stringify(listen)}`);
  return { host: m[1]!, port: Number(m[2]) };
}

export function startPeerListener(o: { listen: string; tls: PeerTls | null; handle: (req: Request, env: { ip: string | null }) => Response | Promise<Response> }): PeerListener {
  const { host, port } = hostPort(o.listen);
  let server: Server<undefined>;
  try {
    server = Bun.serve({
      hostname: host,
      port,
      idleTimeout: IDLE_TIMEOUT_S,
      ...(o.tls ? { tls: peerServerTls(o.tls) } : {}),
      fetch(req, srv): Response | Promise<Response> {
        // a Host Bun cannot make a URL of is a 400, as on the frontend listener (src/frontend/server.ts)
        if (!URL.canParse(req.url)) return Response.json({ error: { message: "malformed Host header (RFC 9112 §3.2)", type: "invalid_request_error", code: "invalid_host" } }, { status: 400 });
        if (req.method === "POST" && new URL(req.url).pathname === FORWARD_PATH) srv.timeout(req, 0);
        return o.handle(req, { ip: srv.requestIP(req)?.address ?? null });
      },
    });
  } catch (e) {
    throw new Error(`cannot listen on cluster.listen ${o.listen}: ${(e as Error).message}`);
  }
  return { port: server.port ?? port, stop: () => server.stop(true) };
}
