// The PEM files of a TLS listener (frontend.tls here; cluster.tls reads its own in
// src/cluster/tls.ts): read at start under a size bound, each error naming its config key, and the
// certificate's expiry (notAfter) for the herd_tls_cert_expiry_timestamp_seconds gauge and its alert
// (config/observability/). The expiry is parsed with node:crypto's X509Certificate (Node's docs,
// "Class: X509Certificate"), so no openssl binary is needed at run time; for a chain the first
// certificate — the leaf this listener presents — is the one that counts.
import { X509Certificate } from "node:crypto";
import { readSmallFileSync } from "../core/read-limited.ts";

const PEM_MAX_BYTES = 1024 * 1024;

/** PEM text for Bun.serve's `tls`; `ca` set = clients must present a certificate it signed. */
export interface ListenerTls {
  cert: string;
  key: string;
  ca: string | null;
}

export class TlsFileError extends Error {}

/** One PEM file; throws naming `key` (e.g. `frontend.tls.cert`) and the path. */
export function readPem(key: string, path: string): string {
  try {
    const text = readSmallFileSync(path, PEM_MAX_BYTES);
    if (!text.includes("-----BEGIN ")) throw new Error("not a PEM file");
    return text;
  } catch (e) {
    throw new TlsFileError(`${key} ${path}: ${(e as Error).message}`);
  }
}

/** `prefix.cert/key/ca` read, or null when cert and key are empty (TLS off). */
export function loadListenerTls(prefix: string, files: { cert: string; key: string; ca: string }): ListenerTls | null {
  if (files.cert === "" && files.key === "") return null;
  const tls = { cert: readPem(`${prefix}.cert`, files.cert), key: readPem(`${prefix}.key`, files.key), ca: files.ca === "" ? null : readPem(`${prefix}.ca`, files.ca) };
  certNotAfterS(tls.cert, `${prefix}.cert`); // a file that is PEM but not a certificate fails here, at start
  return tls;
}

/** Bun.serve's `tls` option for a listener. */
export function serverTls(t: ListenerTls): { cert: string; key: string; ca?: string; requestCert?: boolean; rejectUnauthorized?: boolean } {
  return t.ca === null ? { cert: t.cert, key: t.key } : { cert: t.cert, key: t.key, ca: t.ca, requestCert: true, rejectUnauthorized: true };
}

/** The leaf certificate's notAfter in Unix seconds; throws naming `key` when it is not a certificate. */
export function certNotAfterS(pem: string, key = "certificate"): number {
  let validTo: string;
  try {
    validTo = new X509Certificate(pem).validTo;
  } catch (e) {
    throw new TlsFileError(`${key}: not an X.509 certificate (${(e as Error).message})`);
  }
  const ms = Date.parse(validTo);
  if (!Number.isFinite(ms)) throw new TlsFileError(`${key}: cannot read its expiry ${JSON.stringify(validTo)}`);
  return ms / 1000;
}
