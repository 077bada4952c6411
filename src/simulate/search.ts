// `--replicas search[:MAX]`: the smallest replica count whose run meets the SLO, for one policy and
// load. Doubling from 1 until a count meets it (or MAX fails), then bisection between the last
// failing and the first passing count. Assumes more replicas never hurt (checked by the tests'
// sanity property); every run tried is returned so the table shows the curve.
import type { SimEntry } from "./report.ts";

export function searchReplicas(run: (replicas: number) => SimEntry, max: number): SimEntry[] {
  const tried = new Map<number, SimEntry>();
  const at = (n: number) => {
    let e = tried.get(n);
    if (!e) tried.set(n, (e = run(n)));
    return e;
  };
  let lo = 0; // largest count known to fail (0 = none tried)
  let hi = 0; // smallest count known to pass
  for (let n = 1; ; n = Math.min(max, n * 2)) {
    if (at(n).meets_slo) {
      hi = n;
      break;
    }
    lo = n;
    if (n >= max) break;
  }
  if (hi > 0) {
    while (hi - lo > 1) {
      const mid = (lo + hi) >> 1;
      if (at(mid).meets_slo) hi = mid;
      else lo = mid;
    }
  }
  return [...tried.values()].sort((a, b) => a.replicas - b.replicas);
}
