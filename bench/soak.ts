// Soak (issue 22 "Proof"): one `herd run` node (sim engines, KV tier with its RESP server, a separate
// peer-API listener; P/D off unless --pd, which adds a prefill and a decode sim engine so herd's NIXL
// metadata store listens too) under legitimate traffic — OpenAI-style chat streams, redis-cli-like
// RESP SET/GET, /health, /metrics, /admin, the peer view — mixed with hostile traffic against every
// listener: oversized and chunked bodies, garbage bytes, slowloris headers, pipelined floods, clients
// that never read their replies (and, with --pd, TCPStore garbage, huge declared lengths and key
// floods on the NIXL store). Every few seconds it samples the daemon's RSS (/proc/PID/status VmRSS)
// and open fds (/proc/PID/fd), prints the curve, and ends with a verdict: flat when the median of
// the last quarter of samples is within --tolerance % of the second quarter's (the first quarter is
// warm-up), for RSS and for fds. Legitimate requests that failed are counted and printed too.
// Run: ./node_modules/.bin/bun bench/soak.ts [--seconds 600] [--sample-s 5] [--tolerance 10] [--pd]
import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from "node:fs";
import { join } from "node:path";
import { cleanup, portBase, startHerd, tempDir } from "../test/helpers/herd.ts";
import { SeededRng } from "../src/core/rng.ts";
import { encodeBlob, encodeU32, VALIDATION_MAGIC } from "../src/pd/tcpstore-wire.ts";

const arg = (name: string, dflt: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? Number(process.argv[i + 1]) : dflt;
};
const SECONDS = arg("seconds", 600);
const SAMPLE_S = arg("sample-s", 5);
const TOLERANCE_PCT = arg("tolerance", 10);
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
async function raw(port: number, payload: Uint8Array | ((write: (b: Uint8Array) => void) => Promise<void>), opts: { read?: boolean; holdMs?: number; until?: (got: number) => boolean } = {}): Promise<number> {
  let got = 0;
  let closed = false;
  let wake = () => {};
  const sock = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_s, d) {
        got += d.length;
        wake();
      },
      close: () => ((closed = true), wake()),
      error: () => ((closed = true), wake()),
    },
  }).catch(() => null);
  if (!sock) return 0;
  if (opts.read === false) sock.pause();
  const write = (b: Uint8Array) => void (closed ? 0 : sock.write(b));
  if (typeof payload === "function") await payload(write);
  else write(payload);
  const end = performance.now() + (opts.holdMs ?? 5_000);
  while (!closed && performance.now() < end && !(opts.until?.(got) ?? false)) await new Promise<void>((r) => ((wake = r), setTimeout(r, 50)));
  sock.end();
  return got;
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
  await raw(respPort, enc("PING\r\n".repeat(n)), { until: (got) => got >= 7 * n, holdMs: 30_000 });
  await raw(frontPort, enc("GET /health HTTP/1.1\r\nHost: x\r\n\r\n".repeat(500)), { holdMs: 5_000 });
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
  else if (r === 1) await raw(nixlPort, Buffer.concat([validate, ...Array.from({ length: 5000 }, (_, i) => Buffer.concat([Uint8Array.of(1), encodeBlob(enc(`soak/${rng.int(1e9)}/${i}`)), encodeBlob(new Uint8Array(512))]))]), { holdMs: 2_000 });
  else await raw(nixlPort, Buffer.concat([validate, ...Array.from({ length: 2000 }, () => Buffer.concat([Uint8Array.of(3), encodeBlob(enc("nope"))]))]), { read: false, holdMs: 5_000 });
};

// ---- sampling ----
const samples: { s: number; rssMiB: number; fds: number }[] = [];
const t0 = performance.now();
function sample(): void {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const rssKiB = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  const s = { s: Math.round((performance.now() - t0) / 1000), rssMiB: rssKiB / 1024, fds: readdirSync(`/proc/${pid}/fd`).length };
  samples.push(s);
  console.log(`t=${String(s.s).padStart(4)} s  RSS ${s.rssMiB.toFixed(1).padStart(7)} MiB  fds ${String(s.fds).padStart(4)}`);
}
sample();
const sampler = setInterval(sample, SAMPLE_S * 1000);

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
sample();
clearInterval(sampler); // the curve covers the traffic window only; stragglers finish below
await Promise.all(tasks);
await Bun.sleep(2_000);
const after = readFileSync(`/proc/${pid}/status`, "utf8");
const afterLine = `after the traffic stopped: RSS ${(Number(/VmRSS:\s+(\d+)/.exec(after)?.[1]) / 1024).toFixed(1)} MiB, fds ${readdirSync(`/proc/${pid}/fd`).length}`;

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor(s.length / 2)]!;
};
const q = Math.floor(samples.length / 4);
const verdict = (name: string, f: (x: (typeof samples)[number]) => number, floor: number) => {
  const second = median(samples.slice(q, 2 * q).map(f));
  const last = median(samples.slice(3 * q).map(f));
  const pct = (100 * (last - second)) / second;
  const flat = Math.abs(last - second) <= Math.max(floor, (TOLERANCE_PCT / 100) * second);
  // The quarter minima are the floor of the GC sawtooth (what survives a collection): a leak
  // raises them even when the medians wander with the collector's timing.
  const floor2 = Math.min(...samples.slice(q, 2 * q).map(f));
  const floor4 = Math.min(...samples.slice(3 * q).map(f));
  const grew = last > second + Math.max(floor, (TOLERANCE_PCT / 100) * second);
  console.log(`${name}: second-quarter median ${second.toFixed(1)}, last-quarter median ${last.toFixed(1)} (${pct >= 0 ? "+" : ""}${pct.toFixed(1)} %): ${flat ? "FLAT" : "NOT FLAT"}${!flat && !grew ? " (lower, not higher)" : ""}; quarter minima ${floor2.toFixed(1)} → ${floor4.toFixed(1)}`);
  return flat;
};
console.log(`\n${samples.length} samples over ${SECONDS} s; max RSS ${Math.max(...samples.map((s) => s.rssMiB)).toFixed(1)} MiB, max fds ${Math.max(...samples.map((s) => s.fds))}`);
const rssFlat = verdict("RSS MiB", (s) => s.rssMiB, 0);
const fdFlat = verdict("open fds", (s) => s.fds, 4);
const hs = [...healthMs].sort((a, b) => a - b);
console.log(`/health under load: ${hs.length} probes, p50 ${hs[Math.floor(hs.length / 2)]?.toFixed(1)} ms, p99 ${hs[Math.floor(hs.length * 0.99)]?.toFixed(1)} ms, max ${hs[hs.length - 1]?.toFixed(1)} ms`);
for (const [k, v] of Object.entries(counts).sort()) console.log(`  ${k.padEnd(32)} ok ${String(v.ok).padStart(7)}  failed ${String(v.fail).padStart(5)}`);
console.log(afterLine);
const alive = herd.proc.exitCode === null;
console.log(`daemon ${alive ? "alive" : `exited (${herd.proc.exitCode})`}; verdict: ${rssFlat && fdFlat && alive ? "FLAT" : "NOT FLAT"}`);
await herd.stop();
cleanup(dir);
rmSync(shm, { recursive: true, force: true });
process.exit(rssFlat && fdFlat && alive ? 0 : 1);
