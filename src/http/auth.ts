// Bearer-token checks and client-address classification for the frontend and admin API.
// Keys are compared through their SHA-256 digests with timingSafeEqual, so neither the length nor
// a common prefix of a configured secret leaks through response timing.
import { createHash, timingSafeEqual } from "node:crypto";

const digest = (s: string) => createHash("sha256").update(s).digest();

export class KeySet {
  private readonly digests: Buffer[];
  constructor(keys: readonly string[]) {
    this.digests = keys.filter((k) => k !== "").map(digest);
  }
  get enabled(): boolean {
    return this.digests.length > 0;
  }
  /** True when the Authorization header carries one of the keys as a Bearer token. */
  accepts(authorization: string | null | undefined): boolean {
    const token = bearer(authorization);
    if (token === null) return false;
    const d = digest(token);
    let ok = false;
    for (const k of this.digests) ok = timingSafeEqual(k, d) || ok;
    return ok;
  }
}

export function bearer(authorization: string | null | undefined): string | null {
  if (!authorization) return null;
  const m = /^Bearer\s+(.+)$/i.exec(authorization.trim());
  return m ? m[1]!.trim() : null;
}

/** 127.0.0.0/8, ::1 and IPv4-mapped loopback. An unknown address is not loopback. */
export function isLoopback(ip: string | null | undefined): boolean {
  if (!ip) return false;
  if (ip === "::1") return true;
  const v4 = ip.startsWith("::ffff:") ? ip.slice(7) : ip;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

/** Host header names a loopback address (DNS-rebinding defence for the loopback-only admin API). */
export function isLoopbackHost(host: string | null | undefined): boolean {
  if (!host) return true; // HTTP/1.0 clients may omit Host; browsers never do.
  let h = host.toLowerCase();
  if (h.startsWith("[")) h = h.slice(1, h.indexOf("]"));
  else if (h.includes(":") && h.indexOf(":") === h.lastIndexOf(":")) h = h.slice(0, h.indexOf(":"));
  return h === "localhost" || h === "::1" || isLoopback(h);
}
