// Outgoing peer API calls: POST JSON with the cluster token, a whole-request deadline, keep-alive
// connections (fetch pools them). `dial` maps a member's address to the one to connect to (tests put
// a partition proxy in between; production uses the address as is).
import type { PeerClient } from "./peers.ts";

export const PEER_API_PREFIX = "/cluster/v1";

export function httpPeerClient(o: { token: string; dial?: (address: string) => string; fetch?: typeof fetch; scheme?: "http" | "https" }): PeerClient {
  const scheme = o.scheme ?? "http";
  const f = o.fetch ?? fetch;
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (o.token !== "") headers.authorization = `Bearer ${o.token}`;
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
        throw new Error(`peer ${address} ${path}: HTTP ${res.status}`);
      }
      return (await res.json()) as T;
    },
  };
}
