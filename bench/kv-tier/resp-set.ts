// RESP SET of 1 MiB against its ceilings (issue 25), all in one run: herd as the daemon ships it
// (bench/kv-tier/resp-child.ts "daemon": TierService with every default, the tier on its own thread,
// kv_tier.resp.direct_recv on where available: what bench/kv-tier.ts measures), herd's RespServer on
// the process's own thread with direct_recv off and on, the bare receivers of
// bench/kv-tier/socket-layer.ts (Bun.listen, Bun.listen + libc recv, the same + a ≤ 1 ms poll(2) for
// the next request after each reply, node:net: count bytes, answer +OK, no work), and redis-server. Each server is its own process, driven by bench/kv-tier's client
// (one connection, one SET in flight); after a warm-up round of 20 per server, best of ROUNDS
// alternating rounds of 200 SETs over 8 keys (bench/kv-tier.ts's 1 MiB rounds are the same), MiB/s, ÷ redis.
// RESP_SET_BEFORE=<tree> adds that tree's resp-child.ts with its default (an A/B against an earlier
// commit in the same run); RESP_SET_ENV="A=1 B=2" adds herd (direct) with that environment (mimalloc
// settings); RESP_SET_ONLY="herd daemon,redis-server" drives only the servers named; each herd child's
// RssAnon/RssShmem after the rounds is printed.
// Run: ./node_modules/.bin/bun bench/kv-tier/resp-set.ts
import { spawn, spawnSync } from "bun";
import { mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { freePort, waitUrl } from "../lib/child.ts";
import { BenchClient, benchValue } from "./client.ts";

const MiB = 1024 * 1024;
const ROUNDS = Number(process.env.RESP_SET_ROUNDS ?? 5);
const id = `herd-resp-set-${process.pid}`;

type Kid = { name: string; proc: ReturnType<typeof spawn> | undefined; port: number; herd: boolean };

function herdKid(name: string, tree: string, mode: "daemon" | "direct" | "plain" | undefined, env: Record<string, string> = {}): Kid & { argv: string[]; env: Record<string, string> } {
  const dir = join("/dev/shm", `${id}-${name.replace(/\W+/g, "_")}`);
  mkdirSync(dir, { recursive: true });
  const argv = [process.execPath, join(tree, "bench/kv-tier/resp-child.ts"), join(dir, "cpu"), dir, String(512 * MiB), ...(mode ? [mode] : [])];
  return { name, proc: undefined, port: 0, herd: true, argv, env };
}

const rss = (pid: number): string => {
  const s = readFileSync(`/proc/${pid}/status`, "utf8");
  const kb = (k: string) => Number(new RegExp(`${k}:\\s+(\\d+)`).exec(s)?.[1] ?? 0) / 1024;
  // RssShmem is the tier's shared memory (the values stored), the same for every variant; RssAnon is the heap.
  return `RssAnon ${kb("RssAnon").toFixed(0)} MiB, RssShmem ${kb("RssShmem").toFixed(0)} MiB`;
};

async function main(): Promise<void> {
  const here = join(import.meta.dir, "../..");
  const v = benchValue(MiB);
  const reqBytes = Buffer.byteLength(`*3\r\n$3\r\nSET\r\n$2\r\nk0\r\n$${MiB}\r\n`) + MiB + 2;
  const herds = [herdKid("herd daemon", here, "daemon"), herdKid("herd plain", here, "plain"), herdKid("herd direct", here, "direct")];
  if (process.env.RESP_SET_BEFORE) herds.unshift(herdKid("herd before", process.env.RESP_SET_BEFORE, undefined));
  const extraEnv = Object.fromEntries((process.env.RESP_SET_ENV ?? "").split(/\s+/).filter(Boolean).map((kv) => kv.split("=", 2) as [string, string]));
  if (Object.keys(extraEnv).length > 0) herds.push(herdKid("herd direct +env", here, "direct", extraEnv));
  const kids: Kid[] = [];
  const rport = await freePort();
  const redis = spawn(["redis-server", "--port", String(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdout: "ignore" });
  try {
    for (const h of herds) {
      h.proc = spawn(h.argv, { stdout: "pipe", env: { ...process.env, ...h.env } });
      h.port = Number(await waitUrl(h.proc, /PORT (\d+)/, h.name, "stdout"));
      kids.push(h);
    }
    for (const [name, kind] of [["bare Bun.listen", "bun"], ["bare Bun+recv", "bun-direct"], ["bare Bun+recv+poll", "bun-direct-poll"], ["bare node:net", "node"]] as const) {
      const proc = spawn([process.execPath, join(import.meta.dir, "socket-layer.ts"), "serve", kind, String(reqBytes)], { stdout: "pipe" });
      kids.push({ name, proc, port: Number(await waitUrl(proc, /PORT (\d+)/, name, "stdout")), herd: false });
    }
    let up = false;
    for (let i = 0; i < 250 && !(up = spawnSync(["redis-cli", "-p", String(rport), "PING"]).stdout.toString().includes("PONG")); i++) await Bun.sleep(20);
    if (!up) throw new Error("redis-server never answered PING");
    kids.push({ name: "redis-server", proc: undefined, port: rport, herd: false });
    // RESP_SET_ONLY="herd daemon,redis-server": drive only these (the others still start).
    const only = process.env.RESP_SET_ONLY?.split(",").map((x) => x.trim());
    const driven = only ? kids.filter((k) => only.includes(k.name)) : kids;
    const best = new Map<string, number>();
    for (let round = -1; round < ROUNDS; round++) {
      for (const k of driven) {
        const c = await BenchClient.connect(k.port);
        const n = round < 0 ? 20 : 200; // round -1 warms every server up
        const t = performance.now();
        for (let i = 0; i < n; i++) await c.set(`k${i % 8}`, v);
        const x = n / ((performance.now() - t) / 1000);
        if (round >= 0) best.set(k.name, Math.max(best.get(k.name) ?? 0, x));
        c.close();
      }
    }
    const r = best.get("redis-server")!;
    console.log(`1 MiB SET, one connection, one request in flight; best of ${ROUNDS} alternating rounds of 200 (MiB/s; ÷ redis-server)  load ${readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}`);
    for (const k of driven) console.log(`   ${k.name.padEnd(19)} ${best.get(k.name)!.toFixed(0).padStart(6)}  ${(best.get(k.name)! / r).toFixed(2)}${k.herd && k.proc ? `   ${rss(k.proc.pid)}` : ""}`);
  } finally {
    for (const k of kids) k.proc?.kill();
    redis.kill();
    await Promise.all([...kids.map((k) => k.proc?.exited), redis.exited]);
    for (const h of herds) rmSync(join("/dev/shm", `${id}-${h.name.replace(/\W+/g, "_")}`), { recursive: true, force: true });
  }
}

await main();
