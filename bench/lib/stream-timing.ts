// A streamed answer's timing as the P/D benches read it (bench/pd-vs-aggregated.ts,
// bench/pd-vs-aggregated-herd.ts): time to the first body chunk and the longest gap between chunks.

export interface StreamTiming {
  ttftMs: number;
  maxGapMs: number;
}

/** Read `res`'s body to its end; times from `t0` (performance.now()), multiplied by `scale` (the sims' time scale: model time). */
export async function readStreamTiming(res: Response, t0: number, scale: number): Promise<StreamTiming> {
  const reader = res.body!.getReader();
  let first = -1;
  let last = 0;
  let maxGap = 0;
  for (;;) {
    const r = await reader.read();
    if (r.done) break;
    const now = performance.now();
    if (first < 0) first = now;
    else maxGap = Math.max(maxGap, now - last);
    last = now;
  }
  return { ttftMs: (first - t0) * scale, maxGapMs: maxGap * scale };
}
