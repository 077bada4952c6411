// Mutual TLS for the peer API (issue 22, "TLS between hosts"): forwarded legs (prompts and
// completions), KV relay, tier peer fetch and votes crossed the LAN as plain HTTP with a bearer
// token. With `cluster.tls` every node serves the peer API on its own listener (`cluster.listen`)
// with its certificate, requires a client certificate signed by the cluster CA, and presents its own
// certificate on every outgoing peer call while verifying the other node's against the same CA
// (hostname included: a certificate's subjectAltName must name the node's advertised address).
// The token stays: TLS proves the caller is a node of the cluster, the token that it was configured
// for this cluster. Bun.serve's `tls` option ({cert, key, ca, requestCert, rejectUnauthorized}) and
// Bun's fetch `tls` option ({cert, key, ca}) do both halves (Bun's docs: "HTTP server" and "fetch", TLS).
import { HerdError } from "../core/errors.ts";
import { readSmallFileSync } from "../core/read-limited.ts";
import type { ClusterConfig } from "../config/types.ts";

/** PEM text of this node's certificate, its key and the cluster CA. */
export interface PeerTls {
  cert: string;
  key: string;
  ca: string;
}

/** How this node reaches other nodes' peer APIs: the URL scheme and a fetch that carries the TLS identity. */
export interface PeerTransport {
  scheme: "http" | "https";
  fetch: typeof fetch;
}

const PEM_MAX_BYTES = 1024 * 1024;

export const plainTransport = (base: typeof fetch = fetch): PeerTransport => ({ scheme: "http", fetch: base });

/** The PEM files of `cluster.tls`, or null when it is off. Throws naming the key of a file that cannot be read. */
export function loadPeerTls(c: Pick<ClusterConfig, "tls">): PeerTls | null {
  const { cert, key, ca } = c.tls;
  if (cert === "" && key === "" && ca === "") return null;
  const read = (name: string, path: string) => {
    try {
      const text = readSmallFileSync(path, PEM_MAX_BYTES);
      if (!text.includes("-----BEGIN ")) throw new Error("not a PEM file");
      return text;
    } catch (e) {
      throw new HerdError(500, "server_error", `cluster.tls.${name} ${path}: ${(e as Error).message}`, "cluster_tls");
    }
  };
  return { cert: read("cert", cert), key: read("key", key), ca: read("ca", ca) };
}

export function peerTransport(tls: PeerTls | null, base: typeof fetch = fetch): PeerTransport {
  if (tls === null) return plainTransport(base);
  const withTls = ((url: string | URL | Request, init?: RequestInit) =>
    base(url, { ...init, tls: { cert: tls.cert, key: tls.key, ca: tls.ca } } as RequestInit)) as typeof fetch;
  return { scheme: "https", fetch: withTls };
}

/** Bun.serve `tls` for the peer listener: present our certificate, demand one the CA signed. */
export function peerServerTls(tls: PeerTls): { cert: string; key: string; ca: string; requestCert: true; rejectUnauthorized: true } {
  return { cert: tls.cert, key: tls.key, ca: tls.ca, requestCert: true, rejectUnauthorized: true };
}
