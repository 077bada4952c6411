// A continuously refilled bucket of `perMinute` units, on the caller's clock (a time in ms passed in,
// so the tenant limits and the cluster's quota ledger stay pure): full at creation, refilled in
// proportion to the time since the last look, never above `perMinute`. Spending is `level -= n`;
// the level may go below zero when a caller charges after the fact (tokens counted at the end).
export class RefillBucket {
  level: number;
  private atMs: number;
  constructor(
    public perMinute: number,
    nowMs: number,
  ) {
    this.level = perMinute;
    this.atMs = nowMs;
  }
  /** Refill up to `nowMs` and return the level. */
  at(nowMs: number): number {
    this.level = Math.min(this.perMinute, this.level + ((nowMs - this.atMs) * this.perMinute) / 60_000);
    this.atMs = nowMs;
    return this.level;
  }
}
