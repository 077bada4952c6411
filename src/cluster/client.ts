// Outgoing peer API calls: POST JSON with the cluster token, a whole-request deadline, keep-alive
// connections (fetch pools them). `dial` maps a member's address to the one to connect to (tests put
// a partition proxy in between; production uses the address as is).
// A peer that refuses the token (401: cluster.token differs, or one side has none) is otherwise
// invisible: the node just stays alone ("cluster joined … leader=null"). So a refusal is a warning
// naming the peer, at most one per peer per UNAUTHORIZED_LOG_EVERY_MS (gossip retries every beat).
import type { Clock } from "../core/clock.ts";
import type { Logger } from "../core/log.ts";
import { LogLimiter } from "../http/log-limit.ts";
import type { PeerClient } from "./peers.ts";

export const PEER_API_PREFIX = "/cluster/v1";

/** At most one "peer refused our cluster token" line per peer per this interval. */
export const UNAUTHORIZED_LOG_EVERY_MS = 30_000;
/** Peers whose refusals are tracked (bounded: addresses come from gossip). */
const TRACKED_PEERS_MAX = 256;

export interface PeerClientOptions {
  token: string;
  dial?: (address: string) => string;
  fetch?: typeof fetch;
  /** https when the peer API runs over TLS (cluster.tls). */
  scheme?: "http" | "https";
  /** With both, a 401/403 from a peer is logged at warn (rate-limited per peer). */
  log?: Logger;
  clock?: Clock;
}

export function httpPeerClient(o: PeerClientOptions): PeerClient {
  const scheme = o.scheme ?? "http";
  const f = o.fetch ?? fetch;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (o.token !== "") headers.authorization = `Bearer ${o.token}`;
  const limiters = new Map<string, LogLimiter>();
  const refused = (address: string, path: string, status: number) => {
    if (!o.log || !o.clock) return;
    let lim = limiters.get(address);
    if (!lim) {
      if (limiters.size >= TRACKED_PEERS_MAX) limiters.delete(limiters.keys().next().value!);
      limiters.set(address, (lim = new LogLimiter(o.clock, UNAUTHORIZED_LOG_EVERY_MS)));
    }
    const line = lim.take();
    if (!line) return;
    o.log.warn("peer refused our cluster token: set the same cluster.token (or cluster.token_file) on every node", {
      peer: address, path, status, token: o.token === "" ? "none sent" : "sent", suppressed: line.suppressed,
    });
  };
  return {
    async post<T>(address: string, path: string, body: unknown, timeoutMs: number): Promise<T> {
      const target = o.dial ? o.dial(address) : address;
      const res = await f(`${scheme}://${target}${PEER_API_PREFIX}/${path}`, {
        method: "POST",
        headers,
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(Math.max(1, Math.round(timeoutMs))),
      });
      if (!res.ok) {
        await res.body?.cancel();
        if (res.status === 401 || res.status === 403) refused(address, path, res.status);
        throw new Error(`peer ${address} ${path}: HTTP ${res.status}`);
      }
      return (await res.json()) as T;
    },
  };
}
