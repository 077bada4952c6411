// What sets the p99 of bench/frontend-overhead.ts's latency rows: the same setup (`herd run`, one
// external worker, in front of a zero-delay sim engine; direct and herd alternate in 5 batches per
// row, concurrency 1), with an event-loop lag probe preloaded into herd and the engine
// (bench/lib/loop-lag.ts) and herd's garbage collections logged by JavaScriptCore
// (BUN_JSC_logGC=true; each line is timestamped here when it arrives on herd's stderr pipe). Prints,
// per row, p50/p99 of each side, herd's collections during the row and their pauses, and for the
// requests that set herd's p99 (the worst 1 %) what overlapped each: a herd GC, herd's main thread
// busy on the loop for > 2.5 ms without a GC, the engine's thread busy as long, or a gap in which
// herd's or the engine's thread was off the CPU (the box's scheduler: 3 processes on the herd path, 2
// on the direct one), or a gap in this load generator's own loop. "p99 without herd GC" drops the
// requests a herd collection overlapped — an estimate of what the GCs cost the row, not a measurement
// of another configuration. The probes and the GC log make this a diagnostic, not a speed figure:
// quote bench/frontend-overhead.ts for those.
// Run: ./node_modules/.bin/bun bench/frontend-stalls.ts [requests=500]
// BENCH_HERD_ENV="K=V,K=V" adds environment variables to herd (e.g. BUN_GC_TIMER_DISABLE=1).
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { chatOnce, simEngineArgs, stopHerdAndEngine, writeHerdConfig } from "./lib/chat-once.ts";
import { freePort } from "./lib/child.ts";

const N = Number(process.argv[2] ?? 500);
const ROUNDS = 5;
const ROOT = resolve(import.meta.dir, "..");
const PROBE = join(import.meta.dir, "lib", "loop-lag.ts");
const wall = () => performance.timeOrigin + performance.now();


interface Req {
  herd: boolean;
  t: number;
  ms: number;
}
/** [wall ms, gap ms, main-thread CPU ms] as bench/lib/loop-lag.ts writes them. */
type Gap = [number, number, number];
interface Gc {
  t: number;
  pauseMs: number;
  kind: string;
  /** When JSC logged why (its allocation budget ran out): bytes in JS cells, bytes outside them (ArrayBuffer stores), the last such allocation. */
  budget?: { normal: number; oversized: number; lastOversized: number };
}

/** herd's stderr as lines with their arrival time; resolves with the listening URL. */
function readHerd(proc: ReturnType<typeof Bun.spawn>, lines: [number, string][]): Promise<string> {
  return new Promise((ok, bad) => {
    const dec = new TextDecoder();
    let buf = "";
    let url: string | null = null;
    void (async () => {
      for await (const chunk of proc.stderr as ReadableStream<Uint8Array>) {
        const t = wall();
        buf += dec.decode(chunk, { stream: true });
        for (let i = buf.indexOf("\n"); i >= 0; i = buf.indexOf("\n")) {
          const line = buf.slice(0, i);
          buf = buf.slice(i + 1);
          if (lines.length < 200_000) lines.push([t, line]);
          const m: RegExpExecArray | null = url === null ? /herd ready: listening on (http:\/\/\S+)/.exec(line) : null;
          if (m) ok((url = m[1]!));
        }
      }
      if (url === null) bad(new Error(`herd did not start:\n${lines.map((l) => l[1]).join("\n").slice(-2000)}`));
    })();
  });
}

/** JSC's logGC lines: "START M <kb> => EdenCollection|FullCollection ... p=<ms>" then more "p=" lines of the same cycle. */
function collections(lines: [number, string][]): Gc[] {
  const out: Gc[] = [];
  let budget: Gc["budget"];
  for (const [t, l] of lines) {
    const why = /normal bytes: (\d+) oversized bytes: (\d+) last oversized: (\d+)/.exec(l);
    if (why) budget = { normal: Number(why[1]), oversized: Number(why[2]), lastOversized: Number(why[3]) };
    const start = /START M \d+kb => (\w+)/.exec(l);
    if (start) {
      out.push({ t, pauseMs: 0, kind: start[1]!, ...(budget ? { budget } : {}) });
      budget = undefined;
    }
    if (out.length === 0 || !l.startsWith("[GC<")) continue;
    for (const m of l.matchAll(/p=([\d.]+)ms/g)) out.at(-1)!.pauseMs += Number(m[1]);
  }
  return out;
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))] ?? NaN;
};
const overlaps = (g: Gap, r: Req) => g[0] < r.t + r.ms && g[0] + g[1] > r.t;
/** A GC line arrives after the collection: it belongs to a request if it arrives within the request or just after. */
const gcIn = (gc: Gc, r: Req) => gc.t >= r.t && gc.t <= r.t + r.ms + 2;

const dir = mkdtempSync(join(tmpdir(), "herd-stalls-"));
const simLag = join(dir, "sim-lag.json");
const herdLag = join(dir, "herd-lag.json");
const simPort = await freePort();
const sim = Bun.spawn([process.execPath, "--preload", PROBE, ...simEngineArgs(simPort)], {
  cwd: ROOT,
  stdout: "ignore",
  stderr: "ignore",
  env: { ...process.env, LOOP_LAG_OUT: simLag },
});
const cfg = writeHerdConfig(dir, `http://127.0.0.1:${simPort}`);
const extraEnv = Object.fromEntries((process.env.BENCH_HERD_ENV ?? "").split(",").filter((kv) => kv.includes("=")).map((kv) => [kv.slice(0, kv.indexOf("=")), kv.slice(kv.indexOf("=") + 1)]));
const herd = Bun.spawn([process.execPath, "--preload", PROBE, "src/cli.ts", "run", "--config", cfg, "--listen", "127.0.0.1:0"], {
  cwd: ROOT,
  stdout: "ignore",
  stderr: "pipe",
  env: { ...process.env, HERD_LOG: "info", BUN_JSC_logGC: "true", LOOP_LAG_OUT: herdLag, ...extraEnv },
});
const lines: [number, string][] = [];
// This process's own loop gaps (the load generator shares the box): no thread-CPU figure needed here.
const genGaps: Gap[] = [];
let genLast = performance.now();
const genTimer = setInterval(() => {
  const now = performance.now();
  if (now - genLast > 2.5 && genGaps.length < 50_000) genGaps.push([performance.timeOrigin + genLast, now - genLast, NaN]);
  genLast = now;
}, 1);
const rows: { stream: boolean; reqs: Req[] }[] = [];
try {
  const direct = `http://127.0.0.1:${simPort}`;
  const viaHerd = await readHerd(herd, lines);
  for (const stream of [false, true]) {
    for (let i = 0; i < 30; i++) {
      await chatOnce(direct, stream); // warm-up, as bench/frontend-overhead.ts
      await chatOnce(viaHerd, stream);
    }
    const reqs: Req[] = [];
    for (let r = 0; r < ROUNDS; r++)
      for (const isHerd of [false, true])
        for (let i = 0; i < N / ROUNDS; i++) {
          const t = wall();
          reqs.push({ herd: isHerd, t, ms: await chatOnce(isHerd ? viaHerd : direct, stream) });
        }
    rows.push({ stream, reqs });
  }
} finally {
  clearInterval(genTimer);
  await stopHerdAndEngine(herd, sim);
}
const read = (p: string): Gap[] => {
  try {
    return (JSON.parse(readFileSync(p, "utf8")) as { gaps: Gap[] }).gaps;
  } catch {
    return [];
  }
};
const hGaps = read(herdLag);
const sGaps = read(simLag);
const gcs = collections(lines);
rmSync(dir, { recursive: true, force: true });

console.log(`frontend stalls: ${N} sequential requests per side and row, direct and herd alternating in ${ROUNDS} batches; lag probe in herd and the engine, herd's GCs from BUN_JSC_logGC (${navigator.hardwareConcurrency} cores)`);
for (const { stream, reqs } of rows) {
  const kind = stream ? "stream" : "non-stream";
  const d = reqs.filter((r) => !r.herd).map((r) => r.ms);
  const hr = reqs.filter((r) => r.herd);
  const h = hr.map((r) => r.ms);
  const t0 = reqs[0]!.t;
  const t1 = reqs.at(-1)!.t + reqs.at(-1)!.ms;
  const rowGcs = gcs.filter((g) => g.t >= t0 && g.t <= t1);
  const inHerd = rowGcs.filter((g) => hr.some((r) => gcIn(g, r)));
  const pauses = rowGcs.map((g) => g.pauseMs);
  console.log(`${kind.padEnd(11)} direct p50 ${pct(d, 0.5).toFixed(2)} p99 ${pct(d, 0.99).toFixed(2)} ms   herd p50 ${pct(h, 0.5).toFixed(2)} p99 ${pct(h, 0.99).toFixed(2)} ms   p99 added ${(pct(h, 0.99) - pct(d, 0.99)).toFixed(2)} ms`);
  console.log(
    `${"".padEnd(11)} herd GCs in the row ${rowGcs.length} (${rowGcs.filter((g) => g.kind !== "EdenCollection").length} full), pause median ${pct(pauses, 0.5).toFixed(2)} max ${Math.max(0, ...pauses).toFixed(2)} ms; ${inHerd.length} overlapped a herd request (1 per ${(hr.length / Math.max(1, inHerd.length)).toFixed(0)})`,
  );
  const budgets = rowGcs.flatMap((g) => (g.budget ? [g.budget] : []));
  if (budgets.length > 0) {
    const sum = (f: (b: NonNullable<Gc["budget"]>) => number) => budgets.reduce((n, b) => n + f(b), 0);
    const sizes = new Map<number, number>();
    for (const b of budgets) sizes.set(b.lastOversized, (sizes.get(b.lastOversized) ?? 0) + 1);
    const common = [...sizes].sort((a, b) => b[1] - a[1])[0]!;
    console.log(
      `${"".padEnd(11)} ${budgets.length} of them on the allocation budget: ${(sum((b) => b.oversized) / 1e6).toFixed(0)} MB outside JS cells vs ${(sum((b) => b.normal) / 1e6).toFixed(0)} MB in cells; last such allocation ${common[0]} B in ${common[1]} of ${budgets.length}`,
    );
  }
  const clean = hr.filter((r) => !gcs.some((g) => gcIn(g, r))).map((r) => r.ms);
  console.log(`${"".padEnd(11)} p99 without herd-GC requests ${pct(clean, 0.99).toFixed(2)} ms (added ${(pct(clean, 0.99) - pct(d, 0.99)).toFixed(2)} ms)`);
  const worst = [...hr].sort((a, b) => b.ms - a.ms).slice(0, Math.max(1, Math.ceil(hr.length / 100)));
  const tags = worst.map((r) => {
    const gc = gcs.find((g) => gcIn(g, r));
    const busy = hGaps.filter((g) => overlaps(g, r) && g[2] > 0.5 * g[1]);
    const off = hGaps.filter((g) => overlaps(g, r) && !(g[2] > 0.5 * g[1]));
    const engineBusy = sGaps.filter((g) => overlaps(g, r) && g[2] > 0.5 * g[1]);
    const engineOff = sGaps.filter((g) => overlaps(g, r) && !(g[2] > 0.5 * g[1]));
    const longest = (gs: Gap[]) => Math.max(...gs.map((g) => g[1])).toFixed(1);
    const what = gc
      ? `herd GC ${gc.pauseMs.toFixed(1)} ms`
      : busy.length
        ? `herd busy ${longest(busy)} ms`
        : engineBusy.length
          ? `engine busy ${longest(engineBusy)} ms`
          : off.length || engineOff.length
            ? `off-CPU ${longest([...off, ...engineOff])} ms`
            : genGaps.some((g) => overlaps(g, r))
              ? `load generator gap ${longest(genGaps.filter((g) => overlaps(g, r)))} ms`
              : "none seen";
    return `${r.ms.toFixed(1)} (${what})`;
  });
  console.log(`${"".padEnd(11)} worst herd requests: ${tags.join(", ")}`);
}
