// At most one log line per interval for events a remote client can trigger at will (refused admin
// calls): the rest are counted and the count rides on the next line, so a flood costs the log one
// line per interval instead of one per request. Time from the injected clock.
import type { Clock } from "../core/clock.ts";

export class LogLimiter {
  private lastMs = -Infinity;
  private suppressed = 0;

  constructor(
    private readonly clock: Clock,
    private readonly everyMs: number,
  ) {}

  /** Null when this event's line is suppressed; else how many were suppressed since the last line. */
  take(): { suppressed: number } | null {
    const now = this.clock.now();
    if (now - this.lastMs < this.everyMs) {
      this.suppressed++;
      return null;
    }
    this.lastMs = now;
    const out = { suppressed: this.suppressed };
    this.suppressed = 0;
    return out;
  }
}
