// Remote-hop latency with and without mutual TLS on the peer API (issue 22, "TLS between hosts").
// Two clusters of two `herd run` processes each run side by side in this run: node b owns the only
// worker (an external zero-delay sim engine shared by both clusters); node a has none, so every
// request entering a is forwarded to b over the peer API — plain HTTP in one cluster, mutual TLS
// (`cluster.tls`, certificates made here with openssl) in the other; both use a separate peer listener
// (`cluster.listen`) so TLS is the only difference. Per cluster: p50/p99 of a small non-streaming
// request entering b directly and entering a (the hop), at concurrency 1, in alternating rounds so
// load spikes on the shared box fall on every row alike. Prints the hop's added latency per mode and
// TLS's extra. Connections are kept alive (fetch pools them), so this is the steady state, not the
// handshake.
// Run: ./node_modules/.bin/bun bench/peer-tls.ts [requests=300]
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { makePki } from "../test/helpers/pki.ts";
import { freePort } from "./lib/child.ts";

const N = Number(process.argv[2] ?? 300);
const ROUNDS = 5;
const ROOT = resolve(import.meta.dir, "..");
const MODEL = "bench-sim";
const TOKEN = "bench-peer-token";
const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hello there" }], max_tokens: 8 });

const procs: ReturnType<typeof Bun.spawn>[] = [];
function spawn(args: string[]) {
  const p = Bun.spawn([process.execPath, "src/cli.ts", ...args], { cwd: ROOT, stdout: "ignore", stderr: "ignore", env: { ...process.env, HERD_LOG: "warn" } });
  procs.push(p);
  return p;
}

async function until(what: string, probe: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const end = performance.now() + ms;
  while (performance.now() < end) {
    if (await probe().catch(() => false)) return;
    await Bun.sleep(100);
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function once(url: string): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`bad answer from ${url}: ${res.status} ${text.slice(0, 200)}`);
  return performance.now() - t0;
}

const pct = (sorted: number[], p: number) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))]!;

const dir = mkdtempSync(join(tmpdir(), "herd-bench-tls-"));
try {
  mkdirSync(join(dir, "pki"));
  const pki = makePki(join(dir, "pki"), ["a", "b"]);
  const simPort = await freePort("127.0.0.1");
  spawn(["sim-engine", "--port", String(simPort), "--model", MODEL, "--zero-delay", "--output-len", "0"]);
  await until("the sim engine", async () => (await fetch(`http://127.0.0.1:${simPort}/health`)).ok);

  async function cluster(mode: "plain" | "tls") {
    const [fa, fb, pa, pb] = [await freePort("127.0.0.1"), await freePort("127.0.0.1"), await freePort("127.0.0.1"), await freePort("127.0.0.1")];
    const seeds = JSON.stringify([`127.0.0.1:${pa}`, `127.0.0.1:${pb}`]);
    for (const [name, front, peerPort] of [["a", fa, pa], ["b", fb, pb]] as const) {
      const tls = mode === "tls" ? `\n  tls: { cert: ${pki.nodes[name]!.cert}, key: ${pki.nodes[name]!.key}, ca: ${pki.ca} }` : "";
      const engines = name === "b" ? `[{ kind: external, model: ${MODEL}, url: "http://127.0.0.1:${simPort}" }]` : "[]";
      const cfg = join(dir, `${mode}-${name}.yaml`);
      writeFileSync(
        cfg,
        `node: { name: ${name}, data_dir: ${JSON.stringify(join(dir, `${mode}-${name}`))} }
router: { policy: round-robin }
models: [{ name: ${MODEL} }]
engines: ${engines}
cluster:
  discovery: peers
  token: ${TOKEN}
  listen: 127.0.0.1:${peerPort}${tls}
  peers: { seeds: ${seeds} }
`,
        { mode: 0o600 },
      );
      spawn(["run", "--config", cfg, "--listen", `127.0.0.1:${front}`]);
    }
    const a = `http://127.0.0.1:${fa}`;
    await until(`${mode}: node a pools b's worker`, async () => {
      const c = (await (await fetch(`${a}/admin/cluster`)).json()) as { workers: { node: string; state: string }[] };
      return c.workers.some((w) => w.node === "b" && w.state === "ready");
    });
    return { mode, direct: `http://127.0.0.1:${fb}`, hop: a };
  }

  const clusters = [await cluster("plain"), await cluster("tls")];
  const rows = new Map<string, number[]>();
  const urls = clusters.flatMap((c) => [[`${c.mode} direct`, c.direct], [`${c.mode} hop`, c.hop]] as const);
  for (let i = 0; i < 30; i++) for (const [, u] of urls) await once(u); // warm-up: JIT, connections, TLS sessions
  for (let r = 0; r < ROUNDS; r++)
    for (const [name, u] of r % 2 ? [...urls].reverse() : urls) {
      const xs = rows.get(name) ?? [];
      for (let i = 0; i < N / ROUNDS; i++) xs.push(await once(u));
      rows.set(name, xs);
    }
  console.log(`peer hop with and without mutual TLS: ${N} sequential non-streaming requests per row in ${ROUNDS} alternating rounds; 4 herd processes, the sim engine and this load generator share this box (${navigator.hardwareConcurrency} cores)`);
  const stat: Record<string, { p50: number; p99: number }> = {};
  for (const [name, xs] of rows) {
    xs.sort((x, y) => x - y);
    stat[name] = { p50: pct(xs, 0.5), p99: pct(xs, 0.99) };
    console.log(`${name.padEnd(14)} p50 ${stat[name]!.p50.toFixed(3).padStart(8)} ms   p99 ${stat[name]!.p99.toFixed(3).padStart(8)} ms`);
  }
  for (const p of ["p50", "p99"] as const) {
    const plain = stat["plain hop"]![p] - stat["plain direct"]![p];
    const tls = stat["tls hop"]![p] - stat["tls direct"]![p];
    console.log(`added by the hop at ${p}: plain ${plain.toFixed(3)} ms, mutual TLS ${tls.toFixed(3)} ms (TLS adds ${(tls - plain).toFixed(3)} ms, hop ×${(tls / plain).toFixed(2)})`);
  }
} finally {
  for (const p of procs) p.kill("SIGTERM");
  await Promise.all(procs.map((p) => p.exited));
  rmSync(dir, { recursive: true, force: true });
}
