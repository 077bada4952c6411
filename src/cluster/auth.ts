// Peer API authentication: one shared cluster token sent as `Authorization: Bearer <token>`
// (compared through SHA-256 digests with timingSafeEqual, see src/http/auth.ts). Without a token,
// only loopback callers are accepted and the service refuses a non-loopback address.
import type { Clock } from "../core/clock.ts";
import { HerdError } from "../core/errors.ts";
import { readSmallFileSync } from "../core/read-limited.ts";
import type { Logger } from "../core/log.ts";
import { KeySet, isLoopback } from "../http/auth.ts";
import type { ClusterConfig } from "../config/types.ts";

/** A token file holds one line; anything bigger (or a FIFO, a device) is a mistake, refused. */
const TOKEN_FILE_MAX_BYTES = 64 * 1024;

/** The token from `cluster.token` or the first line of `cluster.token_file`; "" when neither is set. */
export function loadToken(c: Pick<ClusterConfig, "token" | "token_file">): string {
  if (c.token !== "") return c.token;
  if (c.token_file === "") return "";
  let text: string;
  try {
    text = readSmallFileSync(c.token_file, TOKEN_FILE_MAX_BYTES);
  } catch (e) {
    throw new HerdError(500, "server_error", `cluster.token_file ${c.token_file}: ${(e as Error).message}`, "cluster_token");
  }
  const token = (text.split("\n")[0] ?? "").trim();
  if (token === "") throw new HerdError(500, "server_error", `cluster.token_file ${c.token_file} is empty`, "cluster_token");
  return token;
}

/** Host part of host:port or [v6]:port. */
export function hostOf(address: string): string {
  const m = /^\[([^\]]+)\]:\d+$/.exec(address);
  if (m) return m[1]!;
  const i = address.lastIndexOf(":");
  return i < 0 ? address : address.slice(0, i);
}

export const isLoopbackAddress = (address: string) => {
  const h = hostOf(address);
  return h === "localhost" || isLoopback(h);
};

/** Decides who may call the peer API and logs rejections at most once per `logEveryMs`. */
export class PeerAuth {
  private readonly keys: KeySet;
  private lastLogAt = -Infinity;
  private suppressed = 0;
  rejected = 0;

  constructor(
    token: string,
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly logEveryMs = 10_000,
  ) {
    this.keys = new KeySet([token]);
  }

  get hasToken(): boolean {
    return this.keys.enabled;
  }

  /** With a token: the Bearer must match. Without one: loopback callers only. */
  check(authorization: string | null | undefined, remoteIp: string | null | undefined, path: string): boolean {
    const ok = this.keys.enabled ? this.keys.accepts(authorization) : isLoopback(remoteIp ?? null);
    if (ok) return true;
    this.rejected++;
    const now = this.clock.now();
    if (now - this.lastLogAt >= this.logEveryMs) {
      this.log.warn("unauthenticated peer request rejected", { remote: remoteIp ?? "unknown", path, suppressed: this.suppressed });
      this.lastLogAt = now;
      this.suppressed = 0;
    } else this.suppressed++;
    return false;
  }
}
