// Event-loop lag probe, loaded into a child with `bun --preload bench/lib/loop-lag.ts` by
// bench/frontend-stalls.ts (never by herd itself). A 1 ms interval timer notes every gap between two
// of its runs longer than LAG_MIN_MS, with the main thread's own CPU time in that gap
// (CLOCK_THREAD_CPUTIME_ID through bun:ffi, Linux): a gap the thread spent on CPU was work on the
// loop (JS, GC, a synchronous syscall); one without CPU was the process not being scheduled (or timer
// slack: an idle Bun process shows a few 2.5–5 ms gaps a second on this box). The list is written to
// LOOP_LAG_OUT as JSON when the process exits, so the probe costs nothing but the timer while it runs.
import { writeFileSync } from "node:fs";

const LAG_MIN_MS = 2.5;
/** Bounded: 50,000 gaps is ~1 MB of JSON; a run of the bench makes a few hundred. */
const MAX_GAPS = 50_000;
const CLOCK_THREAD_CPUTIME_ID = 3; // <linux/time.h>

function threadCpuMs(): () => number {
  try {
    const { dlopen, FFIType, ptr } = require("bun:ffi") as typeof import("bun:ffi");
    const lib = dlopen("libc.so.6", { clock_gettime: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 } });
    const ts = new BigInt64Array(2);
    const p = ptr(ts);
    return () => {
      lib.symbols.clock_gettime(CLOCK_THREAD_CPUTIME_ID, p);
      return Number(ts[0]) * 1e3 + Number(ts[1]) / 1e6;
    };
  } catch {
    return () => NaN; // not Linux/glibc: gaps are listed without their CPU time
  }
}

const out = process.env.LOOP_LAG_OUT;
if (out) {
  const cpuMs = threadCpuMs();
  /** [wall-clock start in ms (performance.timeOrigin based), gap ms, main-thread CPU ms in the gap] */
  const gaps: [number, number, number][] = [];
  let last = performance.now();
  let lastCpu = cpuMs();
  const timer = setInterval(() => {
    const now = performance.now();
    const cpu = cpuMs();
    if (now - last > LAG_MIN_MS && gaps.length < MAX_GAPS) gaps.push([performance.timeOrigin + last, now - last, cpu - lastCpu]);
    last = now;
    lastCpu = cpu;
  }, 1);
  timer.unref();
  process.on("exit", () => writeFileSync(out, JSON.stringify({ gaps, threadCpuMs: cpuMs() })));
}
