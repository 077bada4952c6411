// One cluster node as a real process for the multi-process tests: a ClusterService on loopback with
// its own port and data dir, the peer API mounted (clusterRoutes) and a test-only status route.
// Not the daemon: the integrator wires ClusterService into it. Spec comes as JSON in HERD_TEST_NODE.
// Every time this node becomes leader it appends {"name","term","pid"} to spec.history (JSONL),
// which the tests' history check reads (at most one leader per term).
import { appendFileSync } from "node:fs";
import { Hono } from "hono";
import { RealClock } from "../../../src/core/clock.ts";
import { createLogger } from "../../../src/core/log.ts";
import { SeededRng } from "../../../src/core/rng.ts";
import { defaultConfig } from "../../../src/config/index.ts";
import { clusterRoutes } from "../../../src/cluster/routes.ts";
import { ClusterService } from "../../../src/cluster/service.ts";
import type { NodeSpec } from "./cluster.ts";

const spec = JSON.parse(process.env.HERD_TEST_NODE ?? "{}") as NodeSpec;
const config = defaultConfig();
config.node.name = spec.name;
config.node.data_dir = spec.dataDir;
config.cluster = {
  discovery: spec.discovery,
  token: spec.token,
  token_file: "",
  listen: "",
  tls: { cert: "", key: "", ca: "" },
  file: { dir: spec.fileDir ?? "" },
  peers: { seeds: spec.seeds ?? [] },
  etcd: { endpoints: spec.etcd ?? [], prefix: spec.prefix ?? "/herd", lease_ttl_s: spec.leaseTtlS ?? 3 },
  peer_first_byte_timeout_ms: 1000,
};
const log = createLogger(`node ${spec.name}`);
const svc = new ClusterService({
  config,
  address: `127.0.0.1:${spec.port}`,
  clock: new RealClock(),
  rng: new SeededRng(spec.seed),
  log,
  meta: { pid: process.pid },
  dial: spec.dial ? (a) => spec.dial![a] ?? a : undefined,
});

const app = new Hono<{ Bindings: { ip?: string | null } }>();
app.get("/test/status", (c) => c.json(svc.view()));
app.post("/test/meta", async (c) => {
  svc.setMeta(await c.req.json());
  return c.json({ ok: true });
});
app.route("/", clusterRoutes(svc));
const server = Bun.serve({
  hostname: "127.0.0.1",
  port: spec.port,
  fetch: (req, srv) => app.fetch(req, { ip: srv.requestIP(req)?.address ?? null }),
});

await svc.start();
svc.watch((e) => {
  if (e.kind === "leader" && e.view.self)
    appendFileSync(spec.history, JSON.stringify({ name: spec.name, term: e.view.term, pid: process.pid }) + "\n");
});
const first = svc.leader();
if (first.self) appendFileSync(spec.history, JSON.stringify({ name: spec.name, term: first.term, pid: process.pid }) + "\n");
console.log(`ready ${spec.name} ${spec.port}`);

let stopping = false;
process.on("SIGTERM", async () => {
  if (stopping) return;
  stopping = true;
  await svc.stop();
  server.stop(true);
  process.exit(0);
});
