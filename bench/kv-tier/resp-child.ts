// bench/kv-tier.ts starts herd's RESP server in its own process (as the daemon runs it), so herd and
// redis-server are both separate processes driven by the same client. argv: shm dir, disk dir, cpu bytes.
import { join } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import { KvTier } from "../../src/tier/tier.ts";

const [shm, disk, cpuBytes] = process.argv.slice(2);
const tier = KvTier.open({
  catalogPath: join(disk!, "catalog.sqlite"),
  cpu: { path: shm!, capacityBytes: Number(cpuBytes) },
  clock: new RealClock(),
  bootId: "bench",
});
const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier, directRecv: process.argv[5] === "direct" });
s.start();
console.log(`PORT ${s.port}`);
