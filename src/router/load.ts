// The load figure every load-aware policy compares, written once so explain output and policies
// agree. Two views of the same worker are combined:
// - in_flight: requests herd itself dispatched and has not seen finish. Exact for herd's own
//   traffic and never stale, but blind to traffic that reaches the engine another way.
// - running + waiting: the engine's own queue from its /metrics. Sees all traffic, but lags by up
//   to one scrape interval (null when never scraped or the last scrape failed).
// load = in_flight + outside, outside = (running + waiting − in_flight_at_scrape)⁺: the registry
// stamps herd's own count at each scrape, so the engine's figures split into herd's requests (whose
// current count in_flight already is) and traffic herd did not send. Comparing a scrape with the
// *current* in_flight instead would count herd's requests that finished since the scrape (up to one
// interval of them) as load: the routing quality benchmark showed that stale figure pushing
// requests off the workers holding their prefix (docs/benchmarks.md, "Routing quality").
// Without a stamp (figures set by hand), load = max(in_flight, running + waiting), which never
// under-counts.
import type { Worker, WorkerLoad } from "../workers/worker.ts";
import type { Rng } from "../core/rng.ts";

export function effectiveLoad(load: Readonly<WorkerLoad>): number {
  if (load.running === null && load.waiting === null) return load.in_flight;
  if (typeof load.in_flight_at_scrape === "number") return load.in_flight + outsideRequests(load);
  return Math.max(load.in_flight, (load.running ?? 0) + (load.waiting ?? 0));
}

/**
 * Requests on the engine herd did not send (as of the last scrape): running + waiting beyond herd's
 * in_flight at that scrape, or, without that stamp, beyond the current in_flight. 0 when never scraped.
 */
export function outsideRequests(load: Readonly<WorkerLoad>): number {
  if (load.running === null && load.waiting === null) return 0;
  const herd = typeof load.in_flight_at_scrape === "number" ? load.in_flight_at_scrape : load.in_flight;
  return Math.max(0, (load.running ?? 0) + (load.waiting ?? 0) - herd);
}

/** The load terms shown in explain output for one worker. */
export function loadTerms(w: Readonly<Worker>): Record<string, number | null> {
  return {
    in_flight: w.load.in_flight,
    running: w.load.running,
    waiting: w.load.waiting,
    kv_usage: w.load.kv_usage,
    load: effectiveLoad(w.load),
  };
}

/**
 * Index of the smallest key (compared lexicographically), ties broken uniformly at random through
 * `rng` (reservoir sampling, one pass, no allocation beyond the keys). `keys` must be non-empty.
 */
export function argminRandomTie(keys: readonly (readonly number[])[], rng: Rng): number {
  let best = 0;
  let ties = 1;
  for (let i = 1; i < keys.length; i++) {
    const c = compareKeys(keys[i]!, keys[best]!);
    if (c < 0) {
      best = i;
      ties = 1;
    } else if (c === 0) {
      ties++;
      if (rng.int(ties) === 0) best = i;
    }
  }
  return best;
}

function compareKeys(a: readonly number[], b: readonly number[]): number {
  for (let i = 0; i < a.length; i++) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
