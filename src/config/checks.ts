// Value checks shared by the schema and the CLI. Each returns null when fine, else a message in the
// "expected …" form that findings use.

export interface HostPort {
  host: string;
  port: number;
}

const HOSTNAME = /^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/;
const IPV4 = /^(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3}$/;
const IPV6 = /^[0-9A-Fa-f:.]+$/;

function isHost(h: string): boolean {
  if (IPV4.test(h)) return true;
  // Dotted all-digit strings that failed IPV4 (e.g. 300.1.1.1) are bad addresses, not host names.
  if (/^[\d.]+$/.test(h)) return false;
  return HOSTNAME.test(h);
}

/** `HOST:PORT`, `[IPv6]:PORT`; port 0–65535 (0 = any free port). */
export function parseHostPort(s: string): HostPort | null {
  const m = /^(?:\[([^\]]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(s.trim());
  if (!m) return null;
  const port = Number(m[3]);
  if (port > 65535) return null;
  const v6 = m[1];
  if (v6 !== undefined) return IPV6.test(v6) && v6.includes(":") ? { host: v6, port } : null;
  const host = m[2] ?? "";
  return isHost(host) ? { host, port } : null;
}

export function checkListen(s: string): string | null {
  return parseHostPort(s) ? null : `expected HOST:PORT (e.g. 127.0.0.1:8000 or [::1]:8000), got ${JSON.stringify(s)}`;
}

/** A bare host or IP (no port, no scheme). */
export function checkAdvertise(s: string): string | null {
  if (isHost(s)) return null;
  // A bare IPv6 address has at least two colons; "10.0.0.1:8000" has one and is HOST:PORT.
  if (IPV6.test(s) && s.split(":").length > 2) return null;
  return `expected a host name or IP address without port, got ${JSON.stringify(s)}`;
}

export function checkUrl(s: string): string | null {
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return `expected an http:// or https:// URL, got ${JSON.stringify(s)}`;
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") return `expected an http:// or https:// URL, got ${JSON.stringify(s)}`;
  if (u.search || u.hash) return `expected a base URL without query or fragment, got ${JSON.stringify(s)}`;
  return null;
}

export function checkHealthPath(s: string): string | null {
  return /^\/[A-Za-z0-9\-._~/%]*$/.test(s) ? null : `expected a URL path starting with "/", got ${JSON.stringify(s)}`;
}

/** Wildcard listen hosts collide with every host on the same port. */
export function isWildcardHost(h: string): boolean {
  return h === "0.0.0.0" || h === "::" || h === "";
}
