// Workload names and options from the command line (`doc-qa:documents=8,output=64`), and `plan()`: the
// pure, seeded stream of BenchRequests (shape + arrival time) that `herd bench` sends over HTTP and
// `herd simulate` feeds to in-process engines.

import { exponential, type Rng, SeededRng } from "../core/rng.ts";
import { type BenchRequest, DEFAULTS, shapes, type SyntheticSpec } from "./workloads.ts";

/** Bad workload/arrival input from the user (the CLI prints it as a usage error). */
export class BenchInputError extends Error {
  override name = "BenchInputError";
}

export type Workload = SyntheticSpec | { kind: "trace"; file: string; requests: readonly BenchRequest[] };

/** How requests arrive: Poisson at `rate` req/s, closed-loop (at_s = 0; the runner's concurrency paces them), or a trace's own timestamps. */
export type Arrivals = { kind: "poisson"; rate: number } | { kind: "closed" } | { kind: "recorded" };

/** Stop after `requests` requests or when the offered arrival time reaches `duration_s` (whichever first; null = no bound). */
export interface Limit {
  requests: number | null;
  duration_s: number | null;
}

export const WORKLOAD_NAMES = ["doc-qa", "multi-turn", "rag", "hot-prefix", "fixed", "mixed"] as const;

/**
 * Parse `NAME[:key=value,…]` for a synthetic workload (keys are the spec's fields, e.g. `output=64`).
 * `trace:FILE` is handled by the caller (it reads a file).
 */
export function parseSyntheticWorkload(text: string): SyntheticSpec {
  const colon = text.indexOf(":");
  const name = colon < 0 ? text : text.slice(0, colon);
  const base = (DEFAULTS as Record<string, SyntheticSpec>)[name];
  if (base === undefined) throw new BenchInputError(`unknown workload ${JSON.stringify(name)} (one of ${WORKLOAD_NAMES.join(", ")}, trace:FILE)`);
  const spec: Record<string, unknown> = { ...base };
  if (colon >= 0) {
    for (const part of text.slice(colon + 1).split(",")) {
      if (part === "") continue;
      const eq = part.indexOf("=");
      const key = (eq < 0 ? part : part.slice(0, eq)).replaceAll("-", "_");
      const raw = eq < 0 ? "" : part.slice(eq + 1);
      const cur = spec[key];
      if (key === "kind" || cur === undefined) throw new BenchInputError(`workload ${name}: unknown option ${JSON.stringify(key)} (options: ${Object.keys(base).filter((k) => k !== "kind").join(", ")})`);
      if (typeof cur === "string") {
        if (key === "api" && raw !== "chat" && raw !== "completions") throw new BenchInputError(`workload ${name}: api must be chat or completions`);
        spec[key] = raw;
        continue;
      }
      const n = Number(raw);
      if (raw === "" || !Number.isFinite(n) || n < 0) throw new BenchInputError(`workload ${name}: ${key} must be a non-negative number, got ${JSON.stringify(raw)}`);
      if (key !== "zipf" && !Number.isInteger(n)) throw new BenchInputError(`workload ${name}: ${key} must be an integer, got ${raw}`);
      spec[key] = n;
    }
  }
  const s = spec as unknown as SyntheticSpec;
  const atLeastOne = ["documents", "users", "sessions", "turns", "chunks", "k", "prefixes", "output", "long_output", "short_output"] as const;
  for (const k of atLeastOne) {
    const v = (s as unknown as Record<string, unknown>)[k];
    if (typeof v === "number" && v < 1) throw new BenchInputError(`workload ${name}: ${k} must be at least 1`);
  }
  if (s.kind === "mixed" && s.long_percent > 100) throw new BenchInputError(`workload mixed: long_percent must be at most 100, got ${s.long_percent}`);
  return s;
}

/**
 * The requests of one run, in send order: shapes from the workload and arrival times from `arrivals`,
 * both drawn from forks of one Rng seeded with `seed` (same seed → same requests and times).
 */
export function* plan(workload: Workload, arrivals: Arrivals, limit: Limit, seed: number): Generator<BenchRequest, void> {
  const root: Rng = new SeededRng(seed);
  const shapeRng = root.fork();
  const timeRng = root.fork();
  const maxN = limit.requests ?? Infinity;
  const maxT = limit.duration_s ?? Infinity;
  if (arrivals.kind === "recorded" && workload.kind !== "trace") throw new BenchInputError("recorded arrival times need a trace workload");
  const source: Iterator<Omit<BenchRequest, "at_s"> & { at_s?: number }> =
    workload.kind === "trace" ? workload.requests[Symbol.iterator]() : shapes(workload, shapeRng);
  let t = 0;
  for (let n = 0; n < maxN; n++) {
    const next = source.next();
    if (next.done) return;
    const shape = next.value;
    let at_s = 0;
    if (arrivals.kind === "poisson") {
      if (!(arrivals.rate > 0)) throw new BenchInputError(`rate must be greater than 0, got ${arrivals.rate}`);
      // The first request goes at t=0; gaps are exponential with mean 1/rate.
      if (n > 0) t += exponential(timeRng, 1 / arrivals.rate);
      at_s = t;
    } else if (arrivals.kind === "recorded") at_s = shape.at_s ?? 0;
    if (at_s >= maxT) return;
    yield { ...shape, at_s };
  }
}
