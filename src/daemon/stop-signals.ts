// Stop signals (SIGTERM/SIGINT) as the daemon sees them. The first one starts a drain; a second one
// means "stop now, without waiting for open requests". But one Ctrl-C can arrive twice: the
// terminal sends SIGINT to the whole foreground process group, and a wrapper in that group that
// forwards signals to its child (`bun run start`, `npm start`, some process managers) sends it
// again a few milliseconds later — which used to skip the drain ("received SIGINT again" 2 ms after
// the first). So a repeat within DUPLICATE_WINDOW_MS of the first is the same request; a person
// pressing Ctrl-C again to force a stop does so later than that.

/** Repeats of a stop signal this soon after the first are duplicate deliveries, not a second request. */
export const DUPLICATE_WINDOW_MS = 500;

export type StopVerdict = "stop" | "duplicate" | "force";

export class StopSignals {
  private firstAtMs: number | null = null;

  constructor(private readonly windowMs = DUPLICATE_WINDOW_MS) {}

  /** Classify a stop signal received at `nowMs` (any monotonic clock). */
  receive(nowMs: number): StopVerdict {
    if (this.firstAtMs === null) {
      this.firstAtMs = nowMs;
      return "stop";
    }
    return nowMs - this.firstAtMs < this.windowMs ? "duplicate" : "force";
  }

  /** Milliseconds since the first stop signal (0 before any). */
  sinceFirstMs(nowMs: number): number {
    return this.firstAtMs === null ? 0 : nowMs - this.firstAtMs;
  }
}
