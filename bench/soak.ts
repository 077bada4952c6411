// Soak (issue 22 "Proof"): one `herd run` node (sim engines, KV tier with its RESP server, a separate
// peer-API listener; P/D off unless --pd, which adds a prefill and a decode sim engine so herd's NIXL
// metadata store listens too) under legitimate traffic — OpenAI-style chat streams, redis-cli-like
// RESP SET/GET, /health, /metrics, /admin, the peer view — mixed with hostile traffic against every
// listener: oversized and chunked bodies, garbage bytes, slowloris headers, pipelined floods, clients
// that never read their replies (and, with --pd, TCPStore garbage, huge declared lengths and key
// floods on the NIXL store). Every few seconds it samples the daemon's RSS (/proc/PID/status VmRSS),
// open fds (/proc/PID/fd) and JS heap (/admin/debug/memory, src/daemon/memory.ts; every --gc-every-s
// after a forced full collection: the live heap; the endpoint also collects and measures each worker
// thread — KV tier, NIXL store, JSON guard — on that thread), prints the curves, and ends with a
// verdict: after a warm-up, each series' least-squares trend over the run must stay under
// --tolerance % of its level — fds, the main live heap, each thread's live heap and extra memory,
// mimalloc's bytes in use after GC (the whole process), and RSS's floor (the minimum of each
// --window-s window; the sawtooth's peaks are the collector's timing). Floods go out whole through
// the raw client's queued send (a bare sock.write takes only what the kernel buffer holds).
// SOAK_SMAPS_DIR=dir dumps /proc/PID/smaps after each collection. Legitimate requests that failed
// are counted and printed too.
// Run: ./node_modules/.bin/bun bench/soak.ts [--seconds 600] [--sample-s 5] [--tolerance 10] [--gc-every-s 30]
//        [--window-s 60] [--warmup-s 60] [--pd]
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { join } from "node:path";
import { cleanup, portBase, startHerd, tempDir } from "../test/helpers/herd.ts";
import { rawConnect } from "../test/helpers/raw-socket.ts";
import { SeededRng } from "../src/core/rng.ts";
import { encodeBlob, encodeU32, VALIDATION_MAGIC } from "../src/pd/tcpstore-wire.ts";

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SECONDS = arg("seconds", 600);
const SAMPLE_S = arg("sample-s", 5);
const TOLERANCE_PCT = arg("tolerance", 10);
const GC_EVERY_S = arg("gc-every-s", 30);
const WINDOW_S = arg("window-s", 60);
const WARMUP_S = arg("warmup-s", Math.min(60, Math.round(SECONDS / 4)));
const PD = process.argv.includes("--pd");
const TOKEN = "soak-token";
const MODEL = "soak-sim";
const rng = new SeededRng(Number(process.env.HERD_SEED ?? 22));

const dir = tempDir("herd-soak-");
const shm = mkdtempSync("/dev/shm/herd-soak-");
const base = portBase();
const respPort = base;
const peerPort = base + 1;
const engines = PD
  ? `engines:\n  - { kind: sim, model: ${MODEL}, role: prefill, count: 1, args: ["--time-scale", "20"] }\n  - { kind: sim, model: ${MODEL}, role: decode, count: 1, args: ["--time-scale", "20"] }\npd: { nixl_metadata: herd }\n`
  : `engines: [{ kind: sim, model: ${MODEL}, count: 2, args: ["--time-scale", "20"] }]\n`;
const herd = await startHerd(
  dir,
  `node: { data_dir: ${JSON.stringify(join(dir, "data"))} }
supervisor: { port_range_start: ${base + 10} }
models: [{ name: ${MODEL} }]
cluster: { token: ${TOKEN}, listen: "127.0.0.1:${peerPort}" }
kv_tier:
  cpu: { size: 64MiB, path: ${JSON.stringify(join(shm, "cpu"))} }
  resp: { listen: "127.0.0.1:${respPort}" }
${engines}`,
  { readyTimeoutMs: 60_000 },
);
const pid = herd.proc.pid;
const front = new URL(herd.url);
const frontPort = Number(front.port);

/** The daemon's listening TCP ports: its socket inodes matched against /proc/net/tcp LISTEN rows. */
function listeningPorts(): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /socket:\[(\d+)\]/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]!);
    } catch {}
  }
  const ports: number[] = [];
  for (const f of ["/proc/net/tcp", "/proc/net/tcp6"]) {
    for (const line of readFileSync(f, "utf8").split("\n").slice(1)) {
      const c = line.trim().split(/\s+/);
      if (c[3] === "0A" && inodes.has(c[9]!)) ports.push(parseInt(c[1]!.split(":")[1]!, 16));
    }
  }
  return [...new Set(ports)];
}
const nixlPort = PD ? (listeningPorts().find((p) => ![frontPort, respPort, peerPort].includes(p)) ?? 0) : 0;
console.log(`herd pid ${pid}: frontend ${frontPort}, peer API ${peerPort}, RESP ${respPort}${nixlPort ? `, NIXL ${nixlPort}` : ""}; ${SECONDS} s, sample every ${SAMPLE_S} s`);

const deadline = performance.now() + SECONDS * 1000;
const live = () => performance.now() < deadline;
const counts: Record<string, { ok: number; fail: number }> = {};
const count = (what: string, ok: boolean) => ((counts[what] ??= { ok: 0, fail: 0 })[ok ? "ok" : "fail"]++);
const healthMs: number[] = [];
const enc = (s: string) => new TextEncoder().encode(s);
const respCmd = (...a: (string | Uint8Array)[]) => Buffer.concat([enc(`*${a.length}\r\n`), ...a.flatMap((x) => { const b = typeof x === "string" ? enc(x) : x; return [enc(`$${b.length}\r\n`), b, enc("\r\n")]; })]);

/** A raw TCP client: write `payload`, optionally read until `until` says done or the server closes; bounded by `holdMs`. */
async function raw(port: number, payload: Uint8Array | ((write: (b: Uint8Array) => void) => Promise<void>), opts: { read?: boolean; holdMs?: number; until?: (got: number) => boolean; what?: string; refused?: boolean } = {}): Promise<number> {
  const c = await rawConnect(port, { paused: opts.read === false }).catch(() => null);
  if (!c) return 0;
  // c.send queues what the socket does not take at once and writes it as it drains: a flood larger
  // than the kernel's send buffer arrives whole (a bare sock.write sends a prefix and drops the rest).
  const write = (b: Uint8Array) => void (c.closed() ? 0 : c.send(b));
  if (typeof payload === "function") await payload(write);
  else write(payload);
  const want = typeof payload === "function" ? NaN : payload.length;
  await c.waitUntil((got) => (opts.refused ? c.closed() : (opts.until?.(got) ?? false)), opts.holdMs ?? 5_000, 50);
  // A flood counts as sent once all its bytes went out before the hold ended (for a client that
  // never reads, the server stops reading too, so some stay unwritten by design). A flood herd must
  // refuse (`refused`) counts as refused once herd closed the connection: how many of its bytes the
  // kernel took before that is the socket buffers' business, not herd's.
  if (opts.what && opts.refused) count(`${opts.what} refused (closed by herd)`, c.closed());
  else if (opts.what && !Number.isNaN(want) && opts.read !== false) count(`${opts.what} written whole`, c.sent() === want);
  c.end();
  return c.bytes();
}

async function loop(name: string, body: () => Promise<unknown>, pauseMs = 0): Promise<void> {
  while (live()) {
    try {
      await body();
    } catch (e) {
      count(`${name} threw`, false);
      if (process.env.SOAK_DEBUG) console.error(name, e);
    }
    if (pauseMs) await Bun.sleep(pauseMs);
  }
}

// ---- legitimate traffic ----
const chat = async () => {
  const r = await fetch(`${herd.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 16 + rng.int(48), messages: [{ role: "user", content: `soak ${rng.int(50)} ${"lorem ipsum ".repeat(rng.int(40))}` }] }) });
  const text = await r.text();
  count("chat stream", r.status === 200 && text.includes("data: [DONE]"));
};
const respSetGet = async () => {
  const key = `lmcache:soak:${rng.int(512)}`;
  const value = new Uint8Array(4096 + rng.int(60 * 1024)).fill(97 + rng.int(26));
  const want = 5 + value.length + String(value.length).length + 5; // +OK\r\n and $N\r\n…\r\n
  const got = await raw(respPort, Buffer.concat([respCmd("SET", key, value), respCmd("GET", key)]), { until: (n) => n >= want, holdMs: 10_000 });
  count("resp set/get", got >= want);
};
const health = async () => {
  const t0 = performance.now();
  const r = await fetch(`${herd.url}/health`);
  await r.text();
  healthMs.push(performance.now() - t0);
  count("health", r.status === 200);
};
const observe = async () => {
  for (const [url, h] of [[`${herd.url}/metrics`, {}], [`${herd.url}/admin/cluster`, {}], [`http://127.0.0.1:${peerPort}/cluster/v1/view`, { authorization: `Bearer ${TOKEN}` }]] as const) {
    const r = await fetch(url, { headers: h });
    await r.arrayBuffer();
    count(`GET ${new URL(url).pathname}`, r.status === 200);
  }
};

// ---- hostile traffic ----
function chunkedBody(totalBytes: number): ReadableStream<Uint8Array> {
  let sent = 0;
  const chunk = new Uint8Array(256 * 1024).fill(0x61);
  return new ReadableStream({ pull: (c) => (sent >= totalBytes ? c.close() : ((sent += chunk.length), c.enqueue(chunk))) });
}
const oversized = async () => {
  const targets = [`${herd.url}/v1/chat/completions`, `http://127.0.0.1:${peerPort}/cluster/v1/gossip`, `http://127.0.0.1:${peerPort}/cluster/v1/kv`, `${herd.url}/admin/route/explain`];
  const url = targets[rng.int(targets.length)]!;
  const r = await fetch(url, { method: "POST", headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" }, body: chunkedBody(24 * 1024 * 1024) }).catch(() => null);
  if (r) await r.arrayBuffer().catch(() => {});
  count("hostile oversized (expect 4xx)", r === null || (r.status >= 400 && r.status < 500));
};
const garbage = async () => {
  const ports = [frontPort, peerPort, respPort, ...(nixlPort ? [nixlPort] : [])];
  const b = new Uint8Array(1 + rng.int(64 * 1024));
  for (let i = 0; i < b.length; i++) b[i] = rng.int(256);
  await raw(ports[rng.int(ports.length)]!, b, { holdMs: 2_000 });
};
const slowloris = async () => {
  const port = [frontPort, peerPort][rng.int(2)]!;
  await raw(port, async (write) => {
    const head = enc(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\nX-Pad: ${"a".repeat(200)}`);
    for (let i = 0; i < head.length && live(); i += 16) {
      write(head.subarray(i, i + 16));
      await Bun.sleep(500);
    }
  }, { holdMs: 1_000 });
};
const floods = async () => {
  const n = 200_000;
  const got = await raw(respPort, enc("PING\r\n".repeat(n)), { until: (got) => got >= 7 * n, holdMs: 30_000, what: "flood RESP PING" });
  count("flood RESP PING all answered", got >= 7 * n);
  await raw(frontPort, enc("GET /health HTTP/1.1\r\nHost: x\r\n\r\n".repeat(500)), { holdMs: 5_000, what: "flood HTTP" });
};
const neverRead = async () => {
  const big = respCmd("SET", "lmcache:soak:big", new Uint8Array(4 << 20));
  await raw(respPort, Buffer.concat([big, ...Array.from({ length: 200 }, () => respCmd("GET", "lmcache:soak:big"))]), { read: false, holdMs: 10_000 });
  await raw(frontPort, enc("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000)), { read: false, holdMs: 10_000 });
};
const nixl = async () => {
  const validate = Buffer.concat([Uint8Array.of(0), encodeU32(VALIDATION_MAGIC)]);
  const u64 = (x: bigint) => { const b = new Uint8Array(8); new DataView(b.buffer).setBigUint64(0, x, true); return b; };
  const r = rng.int(3);
  if (r === 0) await raw(nixlPort, Buffer.concat([validate, Uint8Array.of(1), u64(2n ** 62n)]), { holdMs: 2_000 }); // a huge declared key
  else if (r === 1) await raw(nixlPort, Buffer.concat([validate, ...Array.from({ length: 5000 }, (_, i) => Buffer.concat([Uint8Array.of(1), encodeBlob(enc(`soak/${rng.int(1e9)}/${i}`)), encodeBlob(new Uint8Array(512))]))]), { holdMs: 2_000, what: "flood NIXL SET", refused: true }); // 5,000 keys > keysPerConnectionMax (1,024): herd disconnects it
  else await raw(nixlPort, Buffer.concat([validate, ...Array.from({ length: 2000 }, () => Buffer.concat([Uint8Array.of(3), encodeBlob(enc("nope"))]))]), { read: false, holdMs: 5_000 });
};

// ---- sampling ----
// Every sample: VmRSS and open fds from /proc, and the JS heap as it stands (/admin/debug/memory,
// src/daemon/memory.ts). Every --gc-every-s also the live heap: the same endpoint with ?gc=1, which
// runs a full collection first, so only what survives one is counted — the figure a leak raises.
type ThreadMem = { heap_used_bytes: number; heap_capacity_bytes: number; extra_bytes: number; object_count: number; top_object_types: [string, number][] } | { error: string };
type Mem = { heap_bytes: number; heap_capacity_bytes: number; extra_bytes: number; malloc_bytes: number | null; object_count: number; top_object_types: [string, number][]; threads?: Record<string, ThreadMem> };
/** Each worker thread's live heap after a GC on that thread (MiB), by name; a thread that did not answer is left out. */
type ThreadLive = { heapMiB: number; capacityMiB: number; extraMiB: number };
const threadLive = (m: Mem | null): Record<string, ThreadLive> => {
  const out: Record<string, ThreadLive> = {};
  for (const [name, t] of Object.entries(m?.threads ?? {})) if (!("error" in t)) out[name] = { heapMiB: MiB(t.heap_used_bytes), capacityMiB: MiB(t.heap_capacity_bytes), extraMiB: MiB(t.extra_bytes) };
  return out;
};
const memory = async (gc: boolean): Promise<Mem | null> => {
  const r = await fetch(`${herd.url}/admin/debug/memory${gc ? "?gc=1" : ""}`, { signal: AbortSignal.timeout(10_000) }).catch(() => null);
  return r?.ok ? ((await r.json()) as Mem) : null;
};
const MiB = (b: number | null | undefined) => (b == null ? NaN : b / 1048576);
// VmRSS = RssAnon (heaps, malloc, stacks: what a leak grows) + RssFile + RssShmem (the CPU tier's
// /dev/shm file, bounded by kv_tier.cpu.size, resident as the store first touches its pages).
const statusMiB = (field: string, text = readFileSync(`/proc/${pid}/status`, "utf8")) => Number(new RegExp(`${field}:\\s+(\\d+)`).exec(text)?.[1] ?? NaN) / 1024;
const rssMiBNow = () => statusMiB("VmRSS");
const fdsNow = () => readdirSync(`/proc/${pid}/fd`).length;
const samples: { s: number; rssMiB: number; anonMiB: number; shmemMiB: number; fds: number; heapMiB: number; mallocMiB: number; liveMiB: number | null; liveMallocMiB: number | null; liveCapacityMiB: number | null; anonAfterGcMiB: number | null; threads: Record<string, ThreadLive> | null; threadsNow: Record<string, ThreadLive> }[] = [];
const t0 = performance.now();
const baseline = await memory(true);
let nextGcAt = 0;
async function sample(): Promise<void> {
  const s = Math.round((performance.now() - t0) / 1000);
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rssMiB = statusMiB("VmRSS", status);
  const anonMiB = statusMiB("RssAnon", status);
  const shmemMiB = statusMiB("RssShmem", status);
  const fds = fdsNow();
  const m = await memory(false);
  const gc = s >= nextGcAt ? await memory(true) : null;
  if (gc) nextGcAt = s + GC_EVERY_S;
  // SOAK_SMAPS_DIR: the daemon's mappings after each collection, for telling which region grows
  // (mimalloc's segments, JSC's heap, thread stacks) when the figures above stay flat.
  if (gc && process.env.SOAK_SMAPS_DIR) Bun.write(join(process.env.SOAK_SMAPS_DIR, `smaps-${String(s).padStart(4, "0")}.txt`), readFileSync(`/proc/${pid}/smaps`, "utf8"));
  const row = { s, rssMiB, anonMiB, shmemMiB, fds, heapMiB: MiB(m?.heap_bytes), mallocMiB: MiB(m?.malloc_bytes), liveMiB: gc ? MiB(gc.heap_bytes) : null, liveMallocMiB: gc ? MiB(gc.malloc_bytes) : null, liveCapacityMiB: gc ? MiB(gc.heap_capacity_bytes) : null, anonAfterGcMiB: gc ? statusMiB("RssAnon") : null, threads: gc ? threadLive(gc) : null, threadsNow: threadLive(m) };
  samples.push(row);
  console.log(`t=${String(s).padStart(4)} s  RSS ${rssMiB.toFixed(1).padStart(7)} MiB (anon ${anonMiB.toFixed(0)}, shm ${shmemMiB.toFixed(0)})  fds ${String(fds).padStart(4)}  heap ${row.heapMiB.toFixed(1).padStart(6)} MiB  malloc ${row.mallocMiB.toFixed(1).padStart(6)} MiB${row.liveMiB !== null ? `  after GC: RssAnon ${row.anonAfterGcMiB!.toFixed(0)} MiB, heap ${row.liveMiB.toFixed(1)}/${row.liveCapacityMiB!.toFixed(0)} MiB, malloc ${row.liveMallocMiB!.toFixed(1)} MiB${Object.entries(row.threads ?? {}).map(([k, v]) => `, ${k} ${v.heapMiB.toFixed(1)}/${v.capacityMiB.toFixed(0)}+${v.extraMiB.toFixed(1)}`).join("")}` : ""}`);
}
const sampler = (async () => {
  for (let next = performance.now(); live(); ) {
    await sample();
    next += SAMPLE_S * 1000;
    await Bun.sleep(Math.max(0, Math.min(next, deadline) - performance.now()));
  }
})();

const tasks = [
  ...Array.from({ length: 3 }, () => loop("chat", chat)),
  ...Array.from({ length: 2 }, () => loop("resp", respSetGet)),
  loop("health", health, 100),
  loop("observe", observe, 1_000),
  loop("oversized", oversized, 500),
  loop("garbage", garbage, 100),
  ...Array.from({ length: 20 }, () => loop("slowloris", slowloris)),
  loop("floods", floods, 1_000),
  loop("never-read", neverRead, 1_000),
  ...(nixlPort ? [loop("nixl", nixl, 200)] : []),
];
await Bun.sleep(Math.max(0, deadline - performance.now()));
await sampler;
await sample(); // the curve covers the traffic window only; stragglers finish below
await Promise.all(tasks);
await Bun.sleep(2_000);
const afterRssMiB = rssMiBNow();
const afterFds = fdsNow();
const afterMem = await memory(true);
const afterLine = `after the traffic stopped: RSS ${afterRssMiB.toFixed(1)} MiB, fds ${afterFds}, live heap after GC ${MiB(afterMem?.heap_bytes).toFixed(1)} MiB (before the traffic ${MiB(baseline?.heap_bytes).toFixed(1)} MiB), malloc in use ${MiB(afterMem?.malloc_bytes).toFixed(1)} MiB (before ${MiB(baseline?.malloc_bytes).toFixed(1)} MiB), RSS after GC ${rssMiBNow().toFixed(1)} MiB`;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor(s.length / 2)]!;
};
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
/** Least-squares slope of v over t (units of v per unit of t); NaN with fewer than 2 points. */
const slope = (pts: { t: number; v: number }[]) => {
  if (pts.length < 2) return NaN;
  const tm = mean(pts.map((p) => p.t));
  const vm = mean(pts.map((p) => p.v));
  const den = pts.reduce((a, p) => a + (p.t - tm) ** 2, 0);
  return den === 0 ? NaN : pts.reduce((a, p) => a + (p.t - tm) * (p.v - vm), 0) / den;
};
/** The slope's standard error (same units; NaN with fewer than 3 points): how far noise alone moves the trend. */
const slopeSe = (pts: { t: number; v: number }[]) => {
  if (pts.length < 3) return NaN;
  const b = slope(pts);
  const tm = mean(pts.map((p) => p.t));
  const vm = mean(pts.map((p) => p.v));
  const den = pts.reduce((a, p) => a + (p.t - tm) ** 2, 0);
  const rss = pts.reduce((a, p) => a + (p.v - (vm + b * (p.t - tm))) ** 2, 0);
  return Math.sqrt(rss / (pts.length - 2) / den);
};
// The verdict (argued in docs/benchmarks.md "Soak"): after a warm-up, a series is flat when its
// least-squares trend, extrapolated over the measured window, grows less than --tolerance % of its
// mean level (or an absolute floor: 4 fds, 4 MiB of live heap, 8 MiB of malloc after GC or RSS floor).
// malloc after GC is native memory (Buffers' stores, sockets) still held once garbage is collected. RSS is judged by
// its private part's floor (RssAnon; the tier's shared-memory file is bounded by its configured size)
// — each --window-s window's minimum, what is left right after the collector ran — since
// the sawtooth's peaks only say when JSC last collected; the live heap after a forced full GC is
// the direct measure. The old median-of-quarters test is printed for comparison.
const post = samples.filter((x) => x.s >= WARMUP_S);
const spanMin = post.length > 1 ? (post[post.length - 1]!.s - post[0]!.s) / 60 : 0;
const trend = (name: string, unit: string, pts: { t: number; v: number }[], absFloor: number) => {
  const perMin = slope(pts);
  const level = mean(pts.map((p) => p.v));
  const growth = perMin * spanMin;
  const limit = Math.max(absFloor, (TOLERANCE_PCT / 100) * level);
  const flat = pts.length >= 3 && growth <= limit;
  // The verdict is unchanged (growth vs limit); ± is the trend's standard error, printed so a reader
  // can tell a trend from the noise of its points (a window floor's is often as large as the limit).
  console.log(`${name}: ${pts.length} points, mean ${level.toFixed(1)} ${unit}, trend ${perMin >= 0 ? "+" : ""}${perMin.toFixed(2)} ± ${slopeSe(pts).toFixed(2)} ${unit}/min → ${growth >= 0 ? "+" : ""}${growth.toFixed(1)} ${unit} over ${spanMin.toFixed(1)} min (limit +${limit.toFixed(1)}): ${flat ? "FLAT" : pts.length < 3 ? "TOO FEW POINTS" : "GROWING"}`);
  return flat;
};
/** Each whole --window-s window's minimum of `f` after the warm-up (the sawtooth's floor), at the window's middle. */
const floorOf = (f: (x: (typeof samples)[number]) => number) => {
  const windows = new Map<number, { t: number; v: number }>();
  for (const x of post) {
    const w = Math.floor((x.s - WARMUP_S) / WINDOW_S);
    const cur = windows.get(w);
    if (!Number.isFinite(f(x))) continue;
    if (!cur || f(x) < cur.v) windows.set(w, { t: WARMUP_S + (w + 0.5) * WINDOW_S, v: f(x) });
  }
  return [...windows.entries()].filter(([w]) => post.some((x) => x.s >= WARMUP_S + (w + 1) * WINDOW_S - SAMPLE_S)).map(([, p]) => ({ t: p.t / 60, v: p.v })); // whole windows only
};
const floorPts = floorOf((x) => x.rssMiB);
const anonFloorPts = floorOf((x) => x.anonMiB);
console.log(`\n${samples.length} samples over ${SECONDS} s (warm-up ${WARMUP_S} s excluded from the trends); max RSS ${Math.max(...samples.map((s) => s.rssMiB)).toFixed(1)} MiB, max fds ${Math.max(...samples.map((s) => s.fds))}`);
console.log(`RSS MiB, every sample: ${samples.map((x) => x.rssMiB.toFixed(0)).join(", ")}`);
console.log(`fds, every sample: ${samples.map((x) => x.fds).join(", ")}`);
console.log(`live heap after GC (MiB) at t=s: ${samples.filter((x) => x.liveMiB !== null).map((x) => `${x.s}:${x.liveMiB!.toFixed(1)}`).join(", ")}`);
console.log(`malloc in use after GC (MiB) at t=s: ${samples.filter((x) => x.liveMallocMiB !== null).map((x) => `${x.s}:${x.liveMallocMiB!.toFixed(1)}`).join(", ")}`);
console.log(`RssAnon right after each full GC (MiB) at t=s: ${samples.filter((x) => x.anonAfterGcMiB !== null).map((x) => `${x.s}:${x.anonAfterGcMiB!.toFixed(0)}`).join(", ")}`);
console.log(`main heap capacity after GC (MiB): ${samples.filter((x) => x.liveCapacityMiB !== null).map((x) => x.liveCapacityMiB!.toFixed(0)).join(", ")}`);
console.log(`RssAnon MiB, every sample: ${samples.map((x) => x.anonMiB.toFixed(0)).join(", ")}`);
console.log(`RssShmem MiB, every sample: ${samples.map((x) => x.shmemMiB.toFixed(0)).join(", ")}`);
console.log(`RSS floor per ${WINDOW_S} s window (MiB): ${floorPts.map((p) => p.v.toFixed(0)).join(", ")}; RssAnon floor: ${anonFloorPts.map((p) => p.v.toFixed(0)).join(", ")}`);
// What the floor is made of: the same window minima of mimalloc's bytes in use (every thread's heap
// and native allocations: it tracks RssAnon within tens of MiB) and of each heap as sampled, garbage
// included — a heap whose floor rises while its live size after GC does not is collecting later and later.
const floorLine = (label: string, f: (x: (typeof samples)[number]) => number) => `${label} ${floorOf(f).map((p) => (Number.isFinite(p.v) ? p.v.toFixed(0) : "?")).join(", ")}`;
console.log(`window minima (MiB): ${[floorLine("malloc in use", (x) => x.mallocMiB), floorLine("main heap", (x) => x.heapMiB), ...[...new Set(samples.flatMap((x) => Object.keys(x.threadsNow)))].sort().map((n) => floorLine(`${n} heap`, (x) => x.threadsNow[n]?.heapMiB ?? NaN))].join("; ")}`);
const fdFlat = trend("open fds", "fds", post.map((x) => ({ t: x.s / 60, v: x.fds })), 4);
const liveFlat = trend("live heap after GC", "MiB", post.filter((x) => x.liveMiB !== null).map((x) => ({ t: x.s / 60, v: x.liveMiB! })), 4);
trend("(RssAnon right after each full GC of every thread)", "MiB", post.filter((x) => x.anonAfterGcMiB !== null).map((x) => ({ t: x.s / 60, v: x.anonAfterGcMiB! })), 8);
const mallocFlat = trend("malloc in use after GC", "MiB", post.filter((x) => x.liveMallocMiB !== null && Number.isFinite(x.liveMallocMiB)).map((x) => ({ t: x.s / 60, v: x.liveMallocMiB! })), 8);
trend("(VmRSS floor, shared tier pages included)", "MiB", floorPts, 8);
const floorFlat = trend("RssAnon floor (window minima)", "MiB", anonFloorPts, 8);
// Each worker thread's own live heap after a GC on it (src/core/thread-memory.ts): the memory the
// main thread's figures above do not see. Same test, same 4 MiB floor as the main live heap; its
// extra memory (Buffers' and ArrayBuffers' stores the thread holds) with the 8 MiB floor of malloc.
const threadNames = [...new Set(post.flatMap((x) => Object.keys(x.threads ?? {})))].sort();
let threadsFlat = true;
for (const name of threadNames) {
  const pts = post.filter((x) => x.threads?.[name]).map((x) => ({ t: x.s / 60, ...x.threads![name]! }));
  const of = samples.filter((x) => x.threads?.[name]);
  console.log(`${name} thread live heap after GC (MiB) at t=s: ${of.map((x) => `${x.s}:${x.threads![name]!.heapMiB.toFixed(1)}`).join(", ")}; capacity: ${of.map((x) => x.threads![name]!.capacityMiB.toFixed(0)).join(", ")}; extra: ${of.map((x) => x.threads![name]!.extraMiB.toFixed(1)).join(", ")}`);
  threadsFlat = trend(`${name} thread live heap after GC`, "MiB", pts.map((p) => ({ t: p.t, v: p.heapMiB })), 4) && threadsFlat;
  threadsFlat = trend(`${name} thread extra memory after GC`, "MiB", pts.map((p) => ({ t: p.t, v: p.extraMiB })), 8) && threadsFlat;
}
{
  const q = Math.floor(samples.length / 4);
  const second = median(samples.slice(q, 2 * q).map((x) => x.rssMiB));
  const last = median(samples.slice(3 * q).map((x) => x.rssMiB));
  console.log(`(for comparison, the median test: RSS second-quarter median ${second.toFixed(1)} → last-quarter ${last.toFixed(1)} MiB, ${(100 * (last - second) / second).toFixed(1)} %)`);
}
if (baseline && afterMem) {
  const delta = (now: [string, number][], was: [string, number][]) => {
    const b = new Map(was);
    return now.map(([k, n]) => `${k} ${n} (${n - (b.get(k) ?? 0) >= 0 ? "+" : ""}${n - (b.get(k) ?? 0)})`).join(", ");
  };
  console.log(`most numerous object types after the run (count, change since before the traffic): ${delta(afterMem.top_object_types, baseline.top_object_types)}`);
  for (const [name, t] of Object.entries(afterMem.threads ?? {})) {
    const was = baseline.threads?.[name];
    if ("error" in t) console.log(`${name} thread after the run: ${t.error}`);
    else console.log(`${name} thread after the run: live heap ${MiB(t.heap_used_bytes).toFixed(1)} MiB (before ${was && !("error" in was) ? MiB(was.heap_used_bytes).toFixed(1) : "?"}), extra ${MiB(t.extra_bytes).toFixed(1)} MiB, ${t.object_count} objects; ${delta(t.top_object_types, was && !("error" in was) ? was.top_object_types : [])}`);
  }
}
const hs = [...healthMs].sort((a, b) => a - b);
console.log(`/health under load: ${hs.length} probes, p50 ${hs[Math.floor(hs.length / 2)]?.toFixed(1)} ms, p99 ${hs[Math.floor(hs.length * 0.99)]?.toFixed(1)} ms, max ${hs[hs.length - 1]?.toFixed(1)} ms`);
for (const [k, v] of Object.entries(counts).sort()) console.log(`  ${k.padEnd(32)} ok ${String(v.ok).padStart(7)}  failed ${String(v.fail).padStart(5)}`);
console.log(afterLine);
const alive = herd.proc.exitCode === null;
const ok = fdFlat && liveFlat && mallocFlat && floorFlat && threadsFlat && alive;
console.log(`daemon ${alive ? "alive" : `exited (${herd.proc.exitCode})`}; verdict: ${ok ? "FLAT" : "NOT FLAT"}`);
await herd.stop();
cleanup(dir);
rmSync(shm, { recursive: true, force: true });
process.exit(ok ? 0 : 1);
