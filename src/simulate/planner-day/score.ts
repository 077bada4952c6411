// What a planner simulation is judged by: GPU-seconds, SLO attainment (a request attains when its
// TTFT and its mean inter-token latency are within the SLO; a dropped request does not), scale
// events, flaps (a change of direction within FLAP_WINDOW_MS: up then down, or down then up),
// held-request wait p99, requests dropped.

/** A scale-up followed by a scale-down (or the reverse) within this long is a flap. */
export const FLAP_WINDOW_MS = 300_000;

export interface SimScore {
  gpu_seconds: number;
  slo_attainment: number;
  requests: number;
  scale_events: number;
  flaps: number;
  held_wait_p99_s: number;
  dropped: number;
  ttft_p95_s: number;
  virtual_s: number;
}

export interface RequestRec {
  arrivedMs: number;
  firstTokenMs: number | null;
}

export class Scorecard {
  private requests = 0;
  private attained = 0;
  private dropped = 0;
  private readonly ttfts: number[] = [];
  private readonly heldWaits: number[] = [];
  private gpuMsArea = 0;
  private lastGpuMs = 0;
  private engines = 0;
  private events = 0;
  private flaps = 0;
  private lastDir: { dir: 1 | -1; atMs: number } | null = null;

  constructor(
    private readonly slo: { ttftS: number; itlS: number },
    private readonly gpusPerEngine: number,
  ) {}

  begin(arrivedMs: number, _dispatchedMs: number): RequestRec {
    return { arrivedMs, firstTokenMs: null };
  }

  finish(r: RequestRec, endMs: number, outputTokens: number): void {
    this.requests++;
    const ttftS = ((r.firstTokenMs ?? endMs) - r.arrivedMs) / 1000;
    const itlS = outputTokens > 1 ? (endMs - (r.firstTokenMs ?? endMs)) / 1000 / (outputTokens - 1) : 0;
    this.ttfts.push(ttftS);
    if (ttftS <= this.slo.ttftS && itlS <= this.slo.itlS) this.attained++;
  }

  drop(): void {
    this.requests++;
    this.dropped++;
  }

  heldWait(s: number): void {
    this.heldWaits.push(s);
  }

  /** The number of engines holding GPUs changed at `nowMs` (or call with the same number to accrue). */
  gpuTick(nowMs: number, engines: number): void {
    this.gpuMsArea += this.engines * this.gpusPerEngine * (nowMs - this.lastGpuMs);
    this.lastGpuMs = nowMs;
    this.engines = engines;
  }

  action(kind: string, nowMs: number): void {
    const dir = kind === "start" || kind === "wake" ? 1 : kind === "drain" || kind === "sleep" ? -1 : 0;
    if (dir === 0) return;
    this.events++;
    if (this.lastDir && this.lastDir.dir !== dir && nowMs - this.lastDir.atMs < FLAP_WINDOW_MS) this.flaps++;
    this.lastDir = { dir, atMs: nowMs };
  }

  result(nowMs: number): SimScore {
    return {
      gpu_seconds: Math.round(this.gpuMsArea / 1000),
      slo_attainment: this.requests === 0 ? 1 : this.attained / this.requests,
      requests: this.requests,
      scale_events: this.events,
      flaps: this.flaps,
      held_wait_p99_s: pct(this.heldWaits, 0.99),
      dropped: this.dropped,
      ttft_p95_s: pct(this.ttfts, 0.95),
      virtual_s: nowMs / 1000,
    };
  }
}

function pct(xs: number[], q: number): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  return Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))]! * 1000) / 1000;
}
