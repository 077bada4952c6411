// `herd planner status` against a real HTTP listener serving GET /admin/planner from a
// PlannerService (virtual clock, fake supervisor): the table, --json as is, and an unreachable herd.
import { afterAll, describe, expect, test } from "bun:test";
import { VirtualClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { opsMain } from "../../src/ops/commands.ts";
import { LocalActuator } from "../../src/planner/actuator-local.ts";
import { PlannerService } from "../../src/planner/service.ts";
import { plannerRoute } from "../../src/planner/status.ts";
import { engine, testConfig } from "../fixtures/engines/config.ts";
import { FakeSupervisor } from "./fake-supervisor.ts";

const config = testConfig({ engines: [engine({ kind: "sim", count: 2 })] });
config.planner = { ...config.planner, enabled: true, tick_ms: 1_000, pools: [{ engine: 0, min: 1, max: 2, prefill_tokens_per_s: 1_000, decode_tokens_per_s: 100, can_sleep: false, floors: [], pin: -1 }] };
const clock = new VirtualClock(0);
const log = memoryLogger();
const sup = new FakeSupervisor(config, clock);
const planner = new PlannerService({ config, clock, log, actuator: new LocalActuator({ config, supervisor: sup, clock, log, inFlight: () => 0, hostGpus: 0 }), timeOfDayS: () => 0 });
planner.start();
const handler = plannerRoute(planner);
const server = Bun.serve({ hostname: "127.0.0.1", port: 0, fetch: (req) => (new URL(req.url).pathname === "/admin/planner" ? handler(req) : new Response("no", { status: 404 })) });
const url = `http://127.0.0.1:${server.port}`;
afterAll(() => {
  void server.stop(true);
  void planner.stop();
});

async function cli(argv: string[]) {
  let out = "";
  let err = "";
  const code = await opsMain("planner status", argv, { out: (t) => (out += t), err: (t) => (err += t) });
  return { code, out, err };
}

describe("herd planner status", () => {
  test("table: desired vs actual per pool, reason, held, recent actions", async () => {
    clock.advance(1_000); // first tick: the floor (min 1) starts an engine
    await Bun.sleep(0);
    void planner.hold.hold("m/aggregated", { bytes: 1, promptTokens: 1 });
    const r = await cli(["--url", url]);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^planner on  tick 1000 ms  last tick 0\.0s ago  held 1/);
    expect(r.out).toContain("POOL");
    expect(r.out).toMatch(/m\/aggregated\s+engines\[0\]\s+1\s+1 starting\s+scale_up\s+1/);
    expect(r.out).toContain("start m/aggregated on n1  (scale_up) ok");
  });

  test("--json is the admin API's JSON", async () => {
    const r = await cli(["--json", "--url", url]);
    expect(r.code).toBe(0);
    const body = JSON.parse(r.out);
    expect(body.pools[0].pool).toBe("m/aggregated");
    expect(body.held.requests).toBe(1);
  });

  test("unreachable herd: exit 1 and a clear message; a stray argument: exit 2", async () => {
    const r = await cli(["--url", "http://127.0.0.1:1"]);
    expect(r.code).toBe(1);
    expect(r.err).toMatch(/herd planner status: herd is not reachable/);
    expect((await cli(["extra", "--url", url])).code).toBe(2);
  });
});

describe("herd planner status: the cluster's planner", () => {
  test("names the planner node and term, per pool desired/actual and which host runs what, refusals", async () => {
    const { renderPlanner } = await import("../../src/ops/planner.ts");
    const text = renderPlanner({
      enabled: true, dry_run: false, tick_ms: 300, ticks: 9, last_tick_ms_ago: 100, held: { requests: 0, bytes: 0 },
      pools: [{ pool: "m/aggregated", entry: 0, desired: 2, actual: { ready: 1 }, reason: "scale_up", terms: {}, held: { requests: 0, oldest_wait_ms: null }, predicted_ready_ms: null }],
      recent_actions: [], planner_node: "b", term: 4, waiting_for: null,
      cluster_pools: [{ pool: "m/aggregated", desired: 2, actual: 2, reason: "scale_up", hosts: { a: ["a/sim-0:ready"], c: ["c/sim-0:starting"] } }],
      assignments: { refused: { stale_term: 3, no_lease: 0 }, duplicates: 0 },
    });
    expect(text).toContain("cluster planner: b  term 4  refused: stale_term=3");
    expect(text).toMatch(/m\/aggregated\s+2\s+2\s+scale_up\s+a: a\/sim-0:ready; c: c\/sim-0:starting/);
  });
});
