// Idle and AUTH timeouts (server.ts): an unauthenticated connection is closed after `authMs`, any
// connection after `idleMs` without input or output progress (0 = never). Pure: which are late.

export interface TimedConn {
  closing: boolean;
  authed: boolean;
  openedMs: number;
  activeMs: number;
}

/** How often to look: a quarter of the shortest timeout (≥ 10 ms), or undefined when none is set. */
export function sweepEveryMs(idleMs: number, authMs: number): number | undefined {
  const t = [idleMs, authMs].filter((x) => x > 0);
  return t.length > 0 ? Math.max(10, Math.min(...t) / 4) : undefined;
}

export function late(c: TimedConn, nowMs: number, idleMs: number, authMs: number): boolean {
  if (c.closing) return false;
  return (idleMs > 0 && nowMs - c.activeMs > idleMs) || (authMs > 0 && !c.authed && nowMs - c.openedMs > authMs);
}
