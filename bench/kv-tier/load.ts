// Load for bench/tier-isolation.ts, in its own process so its work is not on the loop being measured.
//   ping <port> <n>            one connection pipelines n inline PINGs in one write, reads every +PONG
//   get <port> <key> <clients> <seconds>   clients connections GET the key back to back
// Prints one JSON line: what was done and how long it took.
import { BenchClient } from "./client.ts";

const [mode, portS, ...rest] = process.argv.slice(2);
const port = Number(portS);
const t0 = performance.now();
if (mode === "ping") {
  const n = Number(rest[0]);
  const want = 7 * n;
  let got = 0;
  let done!: () => void;
  const finished = new Promise<void>((r) => (done = r));
  let pump = () => {};
  const sock = await Bun.connect({
    hostname: "127.0.0.1",
    port,
    socket: {
      data(_s, d) {
        got += d.length;
        if (got >= want) done();
      },
      drain: () => pump(),
      close: () => done(),
    },
  });
  const payload = Buffer.from("PING\r\n".repeat(n));
  let off = 0;
  pump = () => {
    while (off < payload.length) {
      const w = sock.write(payload.subarray(off, Math.min(payload.length, off + (1 << 20))));
      if (w <= 0) return;
      off += w;
    }
  };
  pump();
  await finished;
  sock.end();
  console.log(JSON.stringify({ mode, pings: n, replies_bytes: got, ms: performance.now() - t0 }));
} else {
  const [key, clientsS, secondsS] = rest;
  const clients = await Promise.all(Array.from({ length: Number(clientsS) }, () => BenchClient.connect(port)));
  const until = t0 + Number(secondsS) * 1000;
  let bytes = 0;
  let gets = 0;
  await Promise.all(
    clients.map(async (c) => {
      while (performance.now() < until) {
        bytes += await c.get(key!);
        gets++;
      }
      c.close();
    }),
  );
  console.log(JSON.stringify({ mode, gets, bytes, ms: performance.now() - t0 }));
}
process.exit(0);
