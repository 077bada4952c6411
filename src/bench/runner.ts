// Runs one load level: pulls BenchRequests from plan() and sends them open-loop (each at its offered
// time; Poisson or a trace's timestamps) or closed-loop (C workers, each sending its next request when
// the previous one ends). Turns of one session can be kept in order (multi-turn): a turn waits for the
// previous turn of its session to finish. In-flight requests are bounded (maxInflight): when the bound
// is hit, arrivals are sent late, and the lag (start_s − at_s) shows it.

import { type Endpoints, endpoints, sendOne, type Target } from "./client.ts";
import { RealClock, every } from "../core/clock.ts";
import type { RequestRecord } from "../workload/stats.ts";
import type { BenchRequest } from "../workload/workloads.ts";

export interface Progress {
  elapsed_s: number;
  sent: number;
  done: number;
  failed: number;
  inflight: number;
}

export interface RunOnceOptions {
  target: Target;
  /** The requests in send order (from plan()). */
  requests: Iterable<BenchRequest>;
  /** null = open loop (send at at_s); a number = closed loop with this many workers. */
  concurrency: number | null;
  /** Closed loop: stop starting new requests after this long (null = until the requests run out). */
  duration_s: number | null;
  /** Keep each session's requests in order (next waits for the previous to finish). */
  ordered: boolean;
  maxInflight: number;
  onProgress?: (p: Progress) => void;
  progressEvery_ms?: number;
}

export interface RunOnceResult {
  records: RequestRecord[];
  wall_s: number;
  /**
   * Per request index: how late the runner handed the request off versus its offered time (seconds).
   * This is the generator's own lag; waiting for the previous turn of a session is not counted
   * (that wait shows in start_s − at_s).
   */
  dispatchLag_s: number[];
}

/** Send every request of `opts.requests` and return what each did (records in index order). */
export async function runOnce(opts: RunOnceOptions): Promise<RunOnceResult> {
  const ep: Endpoints = endpoints(opts.target);
  const records: RequestRecord[] = [];
  const dispatchLag_s: number[] = [];
  const sessions = new Map<string, Promise<unknown>>();
  let sent = 0;
  let inflight = 0;
  let failed = 0;
  let done = 0;
  let wake: (() => void) | null = null;
  const t0Ms = performance.now();
  const elapsed = () => (performance.now() - t0Ms) / 1000;

  const ticker = opts.onProgress
    ? every(new RealClock({ unref: true }), opts.progressEvery_ms ?? 250, () => opts.onProgress!({ elapsed_s: elapsed(), sent, done, failed, inflight }))
    : null;

  const send = (r: BenchRequest, index: number): Promise<void> => {
    dispatchLag_s[index] = Math.max(0, elapsed() - r.at_s);
    sent++;
    inflight++;
    const before = opts.ordered ? sessions.get(r.session) : undefined;
    const p = (before ? before.then(() => sendOne(opts.target, ep, r, index, t0Ms)) : sendOne(opts.target, ep, r, index, t0Ms)).then((rec) => {
      records.push(rec);
      inflight--;
      done++;
      if (rec.error !== null) failed++;
      if (opts.ordered && sessions.get(r.session) === p) sessions.delete(r.session);
      const w = wake;
      wake = null;
      w?.();
    });
    if (opts.ordered) sessions.set(r.session, p);
    return p;
  };
  const slotFree = () => new Promise<void>((resolve) => (wake = resolve));

  const all: Promise<void>[] = [];
  const it = opts.requests[Symbol.iterator]();
  let index = 0;
  if (opts.concurrency === null) {
    for (let n = it.next(); !n.done; n = it.next()) {
      const r = n.value;
      const waitMs = r.at_s * 1000 - (performance.now() - t0Ms);
      // Sleeping only when ≥1 ms ahead keeps timer churn low at thousands of req/s.
      if (waitMs >= 1) await Bun.sleep(waitMs);
      while (inflight >= opts.maxInflight) await slotFree();
      all.push(send(r, index++));
    }
  } else {
    const worker = async () => {
      for (;;) {
        if (opts.duration_s !== null && elapsed() >= opts.duration_s) return;
        const n = it.next();
        if (n.done) return;
        await send({ ...n.value, at_s: elapsed() }, index++);
      }
    };
    for (let w = 0; w < opts.concurrency; w++) all.push(worker());
  }
  await Promise.all(all);
  ticker?.cancel();
  opts.onProgress?.({ elapsed_s: elapsed(), sent, done, failed, inflight });
  records.sort((a, b) => a.index - b.index);
  return { records, wall_s: elapsed(), dispatchLag_s };
}
