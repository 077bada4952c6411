// Which socket layer to build the RESP server on (issue 25): a bare server that only counts a SET
// request's bytes and answers `+OK`, on Bun.listen and on node:net in Bun, against redis-server, all
// driven by bench/kv-tier's client (one connection, one 1 MiB SET in flight). Each server is its own
// process; best of 5 alternating rounds of 200 SETs, MiB/s, and the ratio to redis-server.
// Run: ./node_modules/.bin/bun bench/kv-tier/socket-layer.ts
//   (the child role: socket-layer.ts serve <bun|bun-direct|bun-direct-poll|node> <request bytes>; bench/kv-tier/resp-set.ts
//   runs these beside herd's own server)
import * as net from "node:net";
import { spawn, spawnSync } from "bun";
import { waitUrl } from "../lib/child.ts";
import { BenchClient } from "./client.ts";
import { freePort } from "../lib/child.ts";
import { directRecv, plainFd } from "../../src/tier/resp/direct-recv.ts";

const MiB = 1024 * 1024;
const OK = Buffer.from("+OK\r\n");
const [role, kind, sizeS] = process.argv.slice(2);

function serve(): void {
  const size = Number(sizeS);
  // Count bytes only: what is measured is the socket layer's receive and reply, not parsing.
  if (kind === "bun-direct" || kind === "bun-direct-poll") return serveDirect(size, kind === "bun-direct-poll");
  if (kind === "bun") {
    let got = 0;
    const l = Bun.listen({ hostname: "127.0.0.1", port: 0, socket: { data(s, d) { got += d.length; for (; got >= size; got -= size) s.write(OK); } } });
    console.log(`PORT ${l.port}`);
  } else {
    const srv = net.createServer((s) => {
      s.setNoDelay(true);
      let got = 0;
      s.on("data", (d) => { got += d.length; for (; got >= size; got -= size) s.write(OK); });
    });
    srv.listen(0, "127.0.0.1", () => console.log(`PORT ${(srv.address() as net.AddressInfo).port}`));
  }
}

/** Bun.listen whose data handler then drains the socket with libc recv into one reused buffer
 * (src/tier/resp/direct-recv.ts): the ceiling for herd's kv_tier.resp.direct_recv. With `poll`
 * (bun-direct-poll, an experiment herd does not do): after each reply it waits up to 1 ms in libc
 * poll(2) for the next request and reads it itself, so uSockets' 512 KiB first read (a fresh JS
 * Buffer per request) is skipped while requests come back to back; the loop is blocked meanwhile. */
function serveDirect(size: number, poll = false): void {
  const d = directRecv();
  if (typeof d === "string") throw new Error(d);
  const { dlopen } = require("bun:ffi") as typeof import("bun:ffi");
  const libc = dlopen("libc.so.6", { poll: { args: ["ptr", "u64", "i32"], returns: "i32" } });
  const pfd = new Uint8Array(8); // struct pollfd { int fd; short events; short revents; }
  const readable = (fd: number) => ((new Int32Array(pfd.buffer, 0, 1)[0] = fd), (new Int16Array(pfd.buffer, 4, 2).set([1, 0])), libc.symbols.poll(pfd, 1, 1) > 0);
  const buf = new Uint8Array(MiB);
  const conns = new Map<unknown, number>();
  const l = Bun.listen({
    hostname: "127.0.0.1",
    port: 0,
    socket: {
      data(s, chunk) {
        let got = (conns.get(s) ?? 0) + chunk.length;
        const fd = plainFd(s) ?? -1;
        for (;;) {
          let n = 1;
          while (got < size && (n = d.recv(fd, buf.subarray(0, Math.min(buf.length, size - got)))) > 0) got += n;
          for (; got >= size; got -= size) s.write(OK);
          // n ≤ 0: nothing more now, an EOF or an error (left to Bun's own read, as herd does).
          if (!poll || n <= 0 || !readable(fd)) break;
        }
        conns.set(s, got);
      },
      close(s) {
        conns.delete(s);
      },
    },
  });
  console.log(`PORT ${l.port}`);
}

const portOf = async (p: ReturnType<typeof spawn>): Promise<number> => Number(await waitUrl(p, /PORT (\d+)/, "server", "stdout"));

async function main(): Promise<void> {
  const v = new Uint8Array(MiB);
  const reqBytes = Buffer.byteLength(`*3\r\n$3\r\nSET\r\n$2\r\nk0\r\n$${MiB}\r\n`) + MiB + 2;
  const kids = (["bun", "node"] as const).map((k) => spawn([process.execPath, import.meta.path, "serve", k, String(reqBytes)], { stdout: "pipe" }));
  const rport = await freePort();
  const redis = spawn(["redis-server", "--port", String(rport), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], { stdout: "ignore" });
  try {
    let up = false;
    for (let i = 0; i < 250 && !(up = spawnSync(["redis-cli", "-p", String(rport), "PING"]).stdout.toString().includes("PONG")); i++) await Bun.sleep(20);
    if (!up) throw new Error("redis-server never answered PING");
    const ports = { "Bun.listen": await portOf(kids[0]!), "node:net": await portOf(kids[1]!), "redis-server": rport };
    const best: Record<string, number> = {};
    for (let round = 0; round < 5; round++) {
      for (const [name, port] of Object.entries(ports)) {
        const c = await BenchClient.connect(port);
        const t = performance.now();
        for (let i = 0; i < 200; i++) await c.set("k0", v);
        best[name] = Math.max(best[name] ?? 0, 200 / ((performance.now() - t) / 1000));
        c.close();
      }
    }
    const r = best["redis-server"]!;
    console.log("bare 1 MiB SET receivers, one connection, one request in flight (MiB/s; ÷ redis-server)");
    for (const [name, x] of Object.entries(best)) console.log(`   ${name.padEnd(13)} ${x.toFixed(0).padStart(6)}  ${(x / r).toFixed(2)}`);
  } finally {
    for (const k of kids) k.kill();
    redis.kill();
  }
}

if (role === "serve") serve();
else await main();
