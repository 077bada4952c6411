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

const SIZE_UNITS: Record<string, number> = {
  "": 1, B: 1,
  KB: 1e3, MB: 1e6, GB: 1e9, TB: 1e12,
  KiB: 1024, MiB: 1024 ** 2, GiB: 1024 ** 3, TiB: 1024 ** 4,
};

/** "64GiB", "1TiB", "512MiB", "100GB", "4096" (bytes) → bytes; null when not a size. */
export function parseSize(s: string): number | null {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*$/.exec(s);
  if (!m) return null;
  const unit = SIZE_UNITS[m[2] ?? ""];
  if (unit === undefined) return null;
  const n = Math.floor(Number(m[1]) * unit);
  return Number.isSafeInteger(n) && n > 0 ? n : null;
}

export function checkSize(s: string): string | null {
  return parseSize(s) === null ? `expected a size such as 64GiB, 512MiB or 100GB (bytes without a unit), got ${JSON.stringify(s)}` : null;
}
