// Shared machinery for the parser fuzz suites in test/fuzz/ (issue 22, "Proof"): seeded cases,
// byte-level mutations, random split points, and the budgets every suite applies — the longest
// synchronous parser step and the memory the run allocated (process.memoryUsage deltas with wide
// slack: these are safety bounds against runaway allocation or a quadratic stall, not benchmarks).
//
// Every case draws from its own SeededRng(seed + case), so a failure message names the one case:
//   HERD_FUZZ_SEED=<seed> HERD_FUZZ_ONLY=<case> bun test test/fuzz/<file>.test.ts
// replays exactly that case. HERD_FUZZ_CASES=<n> runs many more (bench/ does; CI keeps a few hundred).
import { SeededRng, type Rng } from "../../src/core/rng.ts";

export interface FuzzBudgets {
  /** Longest single synchronous call into the parser (wide: the machine is shared and noisy). */
  stepMsMax: number;
  /** Growth of RSS over the whole run. */
  rssBytesMax: number;
  /** Growth of the JS heap over the whole run (measured after a forced collection). */
  heapBytesMax: number;
  /** Longest event-loop stall between the run's forced collections (a 10 ms timer's lateness). */
  loopStallMsMax: number;
}

export const DEFAULT_BUDGETS: FuzzBudgets = { stepMsMax: 1_000, rssBytesMax: 512 * 2 ** 20, heapBytesMax: 256 * 2 ** 20, loopStallMsMax: 1_000 };

export interface FuzzSettings {
  seed: number;
  cases: number;
  /** Only this case (a replay), or undefined for all. */
  only?: number;
}

export function fuzzSettings(defaultSeed: number, defaultCases: number): FuzzSettings {
  const only = process.env.HERD_FUZZ_ONLY;
  return {
    seed: Number(process.env.HERD_FUZZ_SEED ?? defaultSeed),
    cases: Number(process.env.HERD_FUZZ_CASES ?? defaultCases),
    ...(only !== undefined ? { only: Number(only) } : {}),
  };
}

export const pick = <T>(rng: Rng, xs: readonly T[]): T => xs[rng.int(xs.length)]!;

/** The per-case step timer: wrap every synchronous call into the parser with `step`. */
export class StepTimer {
  longestMs = 0;
  longestAt = "";
  /** Set by runFuzz: restarts the stall monitor's clock. */
  onGenerated: () => void = () => {};
  /** Call once the case's input is built: the generator's own time is not a stall of the parser. */
  generated(): void {
    this.onGenerated();
  }
  step<T>(what: string, f: () => T): T {
    const t0 = performance.now();
    try {
      return f();
    } finally {
      const ms = performance.now() - t0;
      if (ms > this.longestMs) {
        this.longestMs = ms;
        this.longestAt = what;
      }
    }
  }
}

function collect(): void {
  Bun.gc(true);
}

/**
 * Run `cases` seeded cases of `body`. Any exception out of a case fails the run with the seed and
 * case number; so does a step over budget, or memory growth over budget at the end.
 */
export async function runFuzz(
  name: string,
  settings: FuzzSettings,
  body: (rng: Rng, timer: StepTimer, index: number) => void | Promise<void>,
  budgets: FuzzBudgets = DEFAULT_BUDGETS,
): Promise<{ cases: number; longestStepMs: number; longestStallMs: number; stallCase: number; rssGrowthBytes: number; heapGrowthBytes: number }> {
  collect();
  const m0 = process.memoryUsage();
  // Started after the forced collection and stopped before the next: a full GC is not a stall.
  const stall = loopStallMonitor();
  let stallCase = -1;
  const timer = new StepTimer();
  timer.onGenerated = () => stall.restart();
  const replay = (i: number) => `HERD_FUZZ_SEED=${settings.seed} HERD_FUZZ_ONLY=${i}`;
  const first = settings.only ?? 0;
  const last = settings.only !== undefined ? settings.only + 1 : settings.cases;
  for (let i = first; i < last; i++) {
    const rng = new SeededRng(settings.seed + i);
    // A turn of the event loop between cases, so the stall monitor measures each case, not the run.
    await new Promise((r) => setImmediate(r));
    try {
      const before = stall.worst();
      await body(rng, timer, i);
      await new Promise((r) => setImmediate(r));
      if (stall.worst() > before) stallCase = i;
    } catch (e) {
      const msg = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
      stall.stop();
      throw new Error(`${name}: seed ${settings.seed} case ${i} failed (replay: ${replay(i)}): ${msg}`, { cause: e });
    }
    if (timer.longestMs > budgets.stepMsMax) {
      stall.stop();
      throw new Error(`${name}: seed ${settings.seed} case ${i}: one synchronous step took ${timer.longestMs.toFixed(0)} ms (${timer.longestAt}; budget ${budgets.stepMsMax} ms; replay: ${replay(i)})`);
    }
  }
  const longestStallMs = stall.stop();
  if (longestStallMs > budgets.loopStallMsMax) throw new Error(`${name}: seed ${settings.seed}: the event loop stalled ${longestStallMs.toFixed(0)} ms (budget ${budgets.loopStallMsMax} ms), in case ${stallCase} (replay: ${replay(stallCase)})`);
  collect();
  const m1 = process.memoryUsage();
  const rssGrowthBytes = m1.rss - m0.rss;
  const heapGrowthBytes = m1.heapUsed - m0.heapUsed;
  if (rssGrowthBytes > budgets.rssBytesMax) throw new Error(`${name}: seed ${settings.seed}: RSS grew ${(rssGrowthBytes / 2 ** 20).toFixed(0)} MiB (budget ${budgets.rssBytesMax / 2 ** 20} MiB)`);
  if (heapGrowthBytes > budgets.heapBytesMax) throw new Error(`${name}: seed ${settings.seed}: heap grew ${(heapGrowthBytes / 2 ** 20).toFixed(0)} MiB (budget ${budgets.heapBytesMax / 2 ** 20} MiB)`);
  return { cases: last - first, longestStepMs: timer.longestMs, longestStallMs, stallCase, rssGrowthBytes, heapGrowthBytes };
}

/** Cut `bytes` into 1..n pieces at random points (sometimes byte by byte, sometimes whole). */
export function splitPoints(rng: Rng, bytes: Uint8Array): Uint8Array[] {
  const mode = rng.int(6);
  if (mode === 0 || bytes.length === 0) return [bytes];
  if (mode === 1 && bytes.length <= 4096) return Array.from(bytes, (_, i) => bytes.subarray(i, i + 1));
  const cuts = new Set<number>();
  const n = 1 + rng.int(Math.min(64, bytes.length));
  for (let i = 0; i < n; i++) cuts.add(rng.int(bytes.length));
  const sorted = [...cuts].sort((a, b) => a - b);
  const out: Uint8Array[] = [];
  let at = 0;
  for (const c of sorted) {
    if (c > at) out.push(bytes.subarray(at, c));
    at = Math.max(at, c);
  }
  out.push(bytes.subarray(at));
  return out;
}

/** Interesting integers for length and count fields (boundaries, overflows, negatives). */
export const INTERESTING_INTS = [0, 1, -1, 2, 7, 8, 255, 256, 1023, 1024, 1025, 4096, 16384, 16385, 65535, 65536, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1, 2 ** 53];

/** Apply 1..k random byte-level mutations: flips, inserts, deletions, duplicated and spliced spans, truncation. */
export function mutate(rng: Rng, input: Uint8Array, dictionary: readonly Uint8Array[] = []): Uint8Array {
  let b = input;
  // Splice by concatenating views: copying large inputs into JS arrays made the suites slow.
  const splice = (at: number, drop: number, insert: Uint8Array) => concatBytes([b.subarray(0, at), insert, b.subarray(Math.min(b.length, at + drop))]);
  const rounds = 1 + rng.int(4);
  for (let r = 0; r < rounds; r++) {
    const at = b.length === 0 ? 0 : rng.int(b.length + 1);
    const last = Math.min(at, b.length - 1);
    switch (rng.int(dictionary.length > 0 ? 8 : 7)) {
      case 0: // flip a bit
        if (b.length > 0) (b = b.slice())[last]! ^= 1 << rng.int(8);
        break;
      case 1: // random byte
        if (b.length > 0) (b = b.slice())[last] = rng.int(256);
        break;
      case 2: // insert random bytes
        b = splice(at, 0, Uint8Array.from({ length: 1 + rng.int(8) }, () => rng.int(256)));
        break;
      case 3: // delete a span
        b = splice(at, 1 + rng.int(16), new Uint8Array(0));
        break;
      case 4: // duplicate a span (repeated headers, doubled frames)
        b = splice(at, 0, b.slice(at, at + 1 + rng.int(Math.max(1, Math.min(64, b.length)))));
        break;
      case 5: // truncate
        b = b.subarray(0, at);
        break;
      case 6: // an ASCII integer from the interesting list (text protocols' length fields)
        b = splice(at, rng.int(4), new TextEncoder().encode(String(pick(rng, INTERESTING_INTS))));
        break;
      default: // a dictionary token
        b = splice(at, rng.int(3), pick(rng, dictionary));
    }
  }
  return b === input ? input.slice() : b;
}

export function concatBytes(parts: readonly Uint8Array[]): Uint8Array {
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** Random bytes, biased toward printable ASCII and protocol punctuation. */
export function randomBytes(rng: Rng, max: number): Uint8Array {
  const n = rng.int(max + 1);
  const out = new Uint8Array(n);
  for (let i = 0; i < n; i++) out[i] = rng.int(3) === 0 ? rng.int(256) : pick(rng, [13, 10, 32, 36, 42, 43, 45, 58, 48, 49, 57, 97, 122, 0]);
  return out;
}

/**
 * The longest event-loop stall while it runs: a 10 ms timer's lateness. For suites whose parser is
 * async (the peer API's handlers), where no single synchronous call can be wrapped in a StepTimer.
 */
export function loopStallMonitor(): { stop: () => number; worst: () => number; restart: () => void } {
  const periodMs = 10;
  let worst = 0;
  let last = performance.now();
  const h = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last - periodMs);
    last = now;
  }, periodMs);
  return {
    worst: () => worst,
    restart: () => void (last = performance.now()),
    stop: () => {
      clearInterval(h);
      return Math.max(worst, performance.now() - last - periodMs);
    },
  };
}
