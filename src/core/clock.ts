// Time is injected everywhere decisions are made, so a seeded simulation can run on a virtual clock
// (no sleeping, no sockets) and reproduce a whole run from one seed.

export interface TimerHandle {
  cancel(): void;
}

export interface Clock {
  /** Milliseconds since an arbitrary epoch; monotonic. */
  now(): number;
  /** Run fn after ms milliseconds (ms may be 0). */
  setTimer(ms: number, fn: () => void): TimerHandle;
  /** Resolve after ms milliseconds of this clock's time. */
  sleep(ms: number): Promise<void>;
  /** Run fn on the next turn of the event loop, after pending I/O; without it, setTimer(0, fn). Bun's
   * setTimeout(0) waits ≥ 1 ms, so work cut into slices (the RESP server's) would crawl on it. */
  immediate?(fn: () => void): TimerHandle;
}

/** A setTimeout's handle (a class: a request arms ~3 timers, and `{ cancel: () => … }` made a closure and its scope each). */
class RealTimer implements TimerHandle {
  constructor(private readonly t: ReturnType<typeof setTimeout>) {}
  cancel(): void {
    clearTimeout(this.t);
  }
}

/** Wall clock backed by performance.now() and setTimeout. */
export class RealClock implements Clock {
  /** `unref`: its timers do not keep the process alive (watchdogs, progress tickers). */
  constructor(private readonly opts: { unref?: boolean } = {}) {}
  now(): number {
    return performance.now();
  }
  setTimer(ms: number, fn: () => void): TimerHandle {
    const t = setTimeout(fn, Math.max(0, ms));
    if (this.opts.unref) t.unref();
    return new RealTimer(t);
  }
  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
  }
  immediate(fn: () => void): TimerHandle {
    const t = setImmediate(fn);
    return { cancel: () => clearImmediate(t) };
  }
}

const NOOP = () => {};

interface Pending {
  at: number;
  seq: number;
  fn: () => void;
  cancelled: boolean;
}

/**
 * Discrete-event clock: timers fire in (time, insertion) order when the owner advances it.
 * Used by `herd simulate` and by deterministic tests.
 */
export class VirtualClock implements Clock {
  private t: number;
  private seq = 0;
  private heap: Pending[] = [];

  constructor(startMs = 0) {
    this.t = startMs;
  }

  now(): number {
    return this.t;
  }

  setTimer(ms: number, fn: () => void): TimerHandle {
    return this.schedule(this.t + Math.max(0, ms), fn);
  }

  /**
   * Run fn at exactly `atMs` (now if that has passed). The sim scheduler's fast-forward sets a
   * window's end with it: `now + (at - now)` need not equal `at` in floating point.
   */
  setTimerAt(atMs: number, fn: () => void): TimerHandle {
    return this.schedule(Math.max(this.t, atMs), fn);
  }

  private schedule(at: number, fn: () => void): TimerHandle {
    const p: Pending = { at, seq: this.seq++, fn, cancelled: false };
    this.push(p);
    // A cancelled timer stays in the heap until its time comes; dropping its function there frees
    // whatever the closure holds (a request's prompt, its block hashes) at once, not at that time.
    return {
      cancel: () => {
        p.cancelled = true;
        p.fn = NOOP;
      },
    };
  }

  sleep(ms: number): Promise<void> {
    return new Promise((resolve) => this.setTimer(ms, resolve));
  }

  /** Time of the next live timer, or undefined when none is pending. */
  peek(): number | undefined {
    while (this.heap.length > 0 && this.heap[0]!.cancelled) this.pop();
    return this.heap[0]?.at;
  }

  /** Fire the next timer (advancing time to it). Returns false when nothing is pending. */
  step(): boolean {
    while (this.heap.length > 0) {
      const p = this.pop()!;
      if (p.cancelled) continue;
      this.t = Math.max(this.t, p.at);
      p.fn();
      return true;
    }
    return false;
  }

  /** Fire every timer due up to and including `untilMs`, then set the time to it. */
  advanceTo(untilMs: number): void {
    for (let next = this.peek(); next !== undefined && next <= untilMs; next = this.peek()) this.step();
    this.t = Math.max(this.t, untilMs);
  }

  advance(ms: number): void {
    this.advanceTo(this.t + ms);
  }

  get pending(): number {
    return this.heap.filter((p) => !p.cancelled).length;
  }

  private less(a: Pending, b: Pending): boolean {
    return a.at < b.at || (a.at === b.at && a.seq < b.seq);
  }

  private push(p: Pending): void {
    const h = this.heap;
    h.push(p);
    let i = h.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.less(h[i]!, h[parent]!)) break;
      [h[i], h[parent]] = [h[parent]!, h[i]!];
      i = parent;
    }
  }

  private pop(): Pending | undefined {
    const h = this.heap;
    if (h.length === 0) return undefined;
    const top = h[0]!;
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < h.length && this.less(h[l]!, h[m]!)) m = l;
        if (r < h.length && this.less(h[r]!, h[m]!)) m = r;
        if (m === i) break;
        [h[i], h[m]] = [h[m]!, h[i]!];
        i = m;
      }
    }
    return top;
  }
}

/**
 * Run `clock` until no timer is pending, letting the promise continuations a timer starts run
 * before the next timer fires (a macrotask turn drains every microtask): code that awaits — the
 * P/D orchestrator over a virtual-time upstream — then runs at the virtual instant that resolved
 * it. Deterministic: in a simulation nothing else is queued on the event loop.
 */
export async function runSettled(clock: VirtualClock): Promise<void> {
  while (clock.step()) await new Promise<void>((ok) => setImmediate(ok));
}

/** Run `fn` every `ms` on `clock` until the handle is cancelled (re-armed after each run). */
export function every(clock: Clock, ms: number, fn: () => void): TimerHandle {
  let handle: TimerHandle | null = null;
  let cancelled = false;
  const arm = () => {
    handle = clock.setTimer(ms, () => {
      if (cancelled) return;
      fn();
      if (!cancelled) arm();
    });
  };
  arm();
  return {
    cancel: () => {
      cancelled = true;
      handle?.cancel();
    },
  };
}

/**
 * Wall-clock time in ms since the Unix epoch, for timestamps that leave the process (OpenAI
 * `created`, KV event `ts`, log records, scrape stamps shown to operators). Never for deadlines or
 * decisions: those use a Clock, which a simulation can replace.
 */
export function wallClockMs(): number {
  return Date.now();
}
