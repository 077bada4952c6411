// herd's RESP server in its own process for bench/kv-tier.ts and bench/kv-tier/resp-set.ts, so herd and
// redis-server are both separate processes driven by the same client.
// argv: shm dir, disk dir, cpu bytes, then the mode:
//   (none) | daemon  the shipped default: a TierService from a config that sets only kv_tier.cpu and
//                    kv_tier.resp.listen, so every other key (kv_tier.thread: worker, resp.direct_recv,
//                    ...) is the default the daemon runs with
//   direct | plain   a bare RespServer over a KvTier on this thread, direct_recv on / off (resp-set.ts's
//                    detailed comparison; trees before issue 25's fifth pass read only "direct")
// Prints "PORT <n>" once listening, then, in daemon mode, the tier's start line (which read path).
import { join } from "node:path";
import { RealClock } from "../../src/core/clock.ts";
import { parseConfigText } from "../../src/config/index.ts";
import { createLogger } from "../../src/core/log.ts";
import { RespServer } from "../../src/tier/resp/server.ts";
import { TierService } from "../../src/tier/service.ts";
import { KvTier } from "../../src/tier/tier.ts";

const [shm, disk, cpuBytes, mode = "daemon"] = process.argv.slice(2);
if (mode === "daemon") {
  const yaml = `node: { data_dir: ${disk} }\nkv_tier:\n  cpu: { size: "${cpuBytes}", path: ${shm} }\n  resp: { listen: "127.0.0.1:0" }\n`;
  const r = parseConfigText(yaml, "bench.yaml", { hostname: "bench", dataDir: disk! });
  if (!r.config) throw new Error(`bench config: ${JSON.stringify(r.findings)}`);
  const lines: string[] = [];
  const log = createLogger("bench", { level: "info", sink: { write: (x) => lines.push(x) }, timestamps: false, json: false });
  const svc = new TierService({ config: r.config, clock: new RealClock(), log, thread: r.config.kv_tier.thread === "worker" });
  await svc.start();
  console.log(`PORT ${svc.respPort}`);
  for (const l of lines.filter((x) => x.includes("kv_tier.resp:"))) console.log(l.trim());
} else {
  const tier = KvTier.open({
    catalogPath: join(disk!, "catalog.sqlite"),
    cpu: { path: shm!, capacityBytes: Number(cpuBytes) },
    clock: new RealClock(),
    bootId: "bench",
  });
  const s = new RespServer({ host: "127.0.0.1", port: 0, store: tier, directRecv: mode === "direct" });
  s.start();
  console.log(`PORT ${s.port}`);
}
