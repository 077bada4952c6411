// Did an engine die because a port herd planned for it was taken between planning and bind? Pure:
// the supervisor (imperative shell) passes the probe and the lease lookup. After the engine's own
// process exited, a planned port that cannot be bound is held by someone else; that is reported
// only when the engine's last error line is about binding (or names the port), so a port still
// held by the dying engine's own children is not blamed for an unrelated crash.

export interface PortCheck {
  port: number;
  /** The address the engine binds it on (HTTP: the entry's host; KV events: every address). */
  host: string;
}

export interface LostPort {
  port: number;
  /** pid of the other herd whose lease holds the port, or null (another process). */
  holder: number | null;
  /** One line for status, the admin API and the "engine down" log line. */
  message: string;
}

const BIND_TROUBLE = /address already in use|eaddrinuse|cannot bind|could not bind|failed to bind|bind\(\) failed|errno 98|in use/i;

export function lostPorts(
  checks: readonly PortCheck[],
  lastError: string | null,
  isFree: (c: PortCheck) => boolean,
  leaseHolder: (port: number) => number | null,
): LostPort | null {
  const about = lastError ?? "";
  const bindTrouble = BIND_TROUBLE.test(about);
  for (const c of checks) {
    const named = new RegExp(`[^0-9]${c.port}(?![0-9])`).test(` ${about}`);
    if (!(bindTrouble || named)) continue;
    if (isFree(c)) continue;
    const holder = leaseHolder(c.port);
    const who = holder !== null ? `another herd on this host (pid ${holder}) leases it` : "another process holds it";
    const tail = lastError ? `: ${lastError}` : "";
    return { port: c.port, holder, message: `port ${c.port} was taken between planning and bind (${who})${tail}` };
  }
  return null;
}
