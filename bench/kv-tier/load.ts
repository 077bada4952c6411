// Load for bench/tier-isolation.ts, in its own process so its work is not on the loop being measured.
//   ping <port> <n>            one connection pipelines n inline PINGs in one write, reads every +PONG
//   get <port> <key> <clients> <seconds>   clients connections GET the key back to back
// Prints one JSON line: what was done and how long it took.
import { BenchClient } from "./client.ts";
import { rawConnect } from "../../test/helpers/raw-socket.ts";

const [mode, portS, ...rest] = process.argv.slice(2);
const port = Number(portS);
const t0 = performance.now();
if (mode === "ping") {
  const n = Number(rest[0]);
  const want = 7 * n;
  const c = await rawConnect(port);
  c.send(Buffer.from("PING\r\n".repeat(n)));
  await c.waitUntil((got) => got >= want, Infinity);
  const got = c.bytes();
  c.end();
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
