// Issue 20 end to end: three `herd run` nodes (peers discovery, one cluster token), the same sim
// pool on each (min 0, max 1, from zero), one planner acting for the cluster — the leader's. A burst
// entering a follower is held there, the follower pushes its summary, the leader starts one engine
// on a host with room (each node declares one GPU through its entry; on a, another model holds it)
// on a host and the held requests are answered; `GET /admin/planner` on the follower answers for the
// cluster (planner_node, term, per pool desired/actual/hosts). Then, back at zero, a second burst
// enters a follower and the leader is SIGKILLed as soon as its start is under way: the survivors
// elect a new leader, which waits a full window and then serves the held requests — with never
// more than the pool's max (one) engine of the pool in the cluster at once (no double start).
// Bounds, not timings: this machine is loaded.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { cleanup, HerdNodes, portBase, startHerd, tempDir } from "../helpers/herd.ts";

const TOKEN = "e2e-planner-token";
const NAMES = ["a", "b", "c"] as const;
type Name = (typeof NAMES)[number];

let dir = "";
const herds = new HerdNodes(NAMES, { logTailChars: 2000, waitMs: 40_000 });
const { procs: nodes, port, url, logs, waitFor } = herds;
const get = async (n: Name, path: string): Promise<any> => (await fetch(`${url(n)}${path}`, { signal: AbortSignal.timeout(3000) })).json();

// Each node declares one GPU (its entry names GPU 0): one engine per host at most. On a, a model
// outside the planner holds that GPU all along: a has no room, so the leader never places there
// (with hosts tied, placement would pick a by name).
const maxEngines = 1;
const prefillTokensPerS = 100_000;

function config(n: Name): string {
  return `node: { name: ${n}, data_dir: ${JSON.stringify(join(dir, n, "data"))} }
frontend: { first_token_timeout_ms: 20000, drain_timeout_ms: 1000 }
router: { policy: least-loaded }
supervisor: { port_range_start: ${herds.base + 100 + 100 * NAMES.indexOf(n)}, health_interval_ms: 100, health_timeout_ms: 300 }
models: [{ name: m }, { name: other }]
engines:
  - { kind: sim, model: m, count: 1, gpus: [0], share_gpu: true, args: ["--time-scale", "10", "--startup-delay-ms", "2500"] }
${n === "a" ? `  - { kind: sim, model: other, count: 1, gpus: [0], share_gpu: true, args: ["--time-scale", "10"] }\n` : ""}
planner:
  enabled: true
  tick_ms: 300
  stable_window_ms: 1500
  panic_window_ms: 600
  down_window_ms: 3000
  down_step_ms: 1000
  up_hold_ms: 1000
  idle_to_sleep_ms: 3000
  hold_timeout_ms: 60000
  pools: [{ engine: 0, min: 0, max: ${maxEngines}, prefill_tokens_per_s: ${prefillTokensPerS}, decode_tokens_per_s: 10000 }]
cluster:
  discovery: peers
  token: ${TOKEN}
  peers: { seeds: ${JSON.stringify(NAMES.map((x) => `127.0.0.1:${port(x)}`))} }
`;
}

/** Engines of the pool across the live nodes (each node's own workers, from its /admin/cluster). */
async function poolEngines(live: readonly Name[]): Promise<string[]> {
  const out: string[] = [];
  for (const n of live) {
    const ws: any[] = (await get(n, "/admin/cluster")).workers;
    for (const w of ws) if (w.node === n && w.model === "m" && (w.state === "ready" || w.state === "starting")) out.push(`${w.id}:${w.state}`);
  }
  return out;
}

async function agreedLeader(among: readonly Name[]): Promise<{ leader: Name; term: number } | null> {
  const views = await Promise.all(among.map((n) => get(n, "/admin/cluster")));
  const set = new Set(views.map((v) => `${v.leader}@${v.term}`));
  return set.size === 1 && views[0].leader !== null && among.includes(views[0].leader) ? { leader: views[0].leader, term: views[0].term } : null;
}

function burst(entry: Name, n: number): Promise<number[]> {
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      fetch(`${url(entry)}/v1/chat/completions`, {
        method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify({ model: "m", messages: [{ role: "user", content: `burst ${i}` }], max_tokens: 4 }), signal: AbortSignal.timeout(90_000),
      }).then(async (r) => {
        await r.arrayBuffer();
        return r.status;
      }),
    ),
  );
}

describe("one planner for the cluster: the leader's", () => {
  beforeAll(async () => {
    herds.base = portBase();
    dir = tempDir("herd-planner-cluster-");
    await Promise.all(
      NAMES.map(async (n) => {
        mkdirSync(join(dir, n));
        nodes.set(n, await startHerd(join(dir, n), config(n), { args: ["--listen", `127.0.0.1:${port(n)}`], readyTimeoutMs: 40_000 }));
      }),
    );
  }, 90_000);
  afterAll(async () => {
    await Promise.all([...nodes.values()].map((h) => h.stop(5_000)));
    if (dir) cleanup(dir);
  });

  test("a burst entering a follower: the leader starts one engine on a host with room, the held requests are answered, /admin/planner answers for the cluster", async () => {
    const l = await waitFor("one leader agreed by all three", () => agreedLeader(NAMES));
    const follower = NAMES.find((n) => n !== l.leader)!;
    expect(await poolEngines(NAMES)).toEqual([]);
    const statuses = await burst(follower, 4);
    expect(statuses).toEqual([200, 200, 200, 200]);
    const engines = await poolEngines(NAMES);
    expect(engines.length).toBe(1);
    expect(engines[0]!.startsWith("a/")).toBe(false); // a's one GPU is taken (a would win the name tie-break): the leader placed it on a host with room
    const view = await waitFor("the follower's /admin/planner names the leader and the engine's host", async () => {
      const v = await get(follower, "/admin/planner");
      return v.planner_node === l.leader && v.cluster_pools?.[0]?.actual === 1 ? v : null;
    });
    expect(view.term).toBe(l.term);
    expect(view.cluster_pools[0]).toMatchObject({ pool: "m/aggregated", desired: 1 });
    expect(Object.values(view.cluster_pools[0].hosts).flat().length).toBe(1);
    // Every node answers with the leader's planner: the same start among its recent actions.
    for (const n of NAMES) {
      const v = await get(n, "/admin/planner");
      expect(v.planner_node).toBe(l.leader);
      expect(v.recent_actions.filter((a: any) => a.kind === "start" && a.outcome === "ok").length).toBe(1);
    }
    for (const n of NAMES) expect((await get(n, "/admin/planner")).assignments?.refused?.stale_term ?? 0).toBe(0);
    await waitFor("idle: the pool back at zero", async () => {
      const v = await get(l.leader, "/admin/planner");
      return (await poolEngines(NAMES)).length === 0 && Object.values(v.cluster_pools?.[0]?.hosts ?? {}).flat().length === 0;
    }, 60_000);
  }, 150_000);

  test("the leader is killed mid-scale-up: a new leader serves the held requests, never two engines of the pool", async () => {
    const l = await waitFor("one leader agreed by all three", () => agreedLeader(NAMES));
    const follower = NAMES.find((n) => n !== l.leader)!;
    const survivors = NAMES.filter((n) => n !== l.leader);
    const answered = burst(follower, 3);
    // While the leader's start is under way (the engine loading), the leader host dies (herd and its engines).
    await waitFor("the leader's start under way", async () => {
      const v = await get(l.leader, "/admin/planner");
      return Object.values(v.cluster_pools?.[0]?.hosts ?? {}).flat().some((e: any) => String(e).endsWith(":starting"));
    }, 30_000);
    nodes.get(l.leader)!.proc.kill("SIGKILL");
    let most = 0;
    const watch = (async () => {
      for (let i = 0; i < 600; i++) {
        most = Math.max(most, (await poolEngines(survivors).catch(() => [])).length);
        await Bun.sleep(100);
      }
    })();
    const next = await waitFor("a new leader among the survivors", async () => {
      const v = await agreedLeader(survivors);
      return v && v.leader !== l.leader && v.term > l.term ? v : null;
    }, 30_000);
    expect(await answered).toEqual([200, 200, 200]);
    const settle = await waitFor("the new leader's view", async () => {
      const v = await get(follower, "/admin/planner");
      return v.planner_node === next.leader ? v : null;
    });
    expect(settle.term).toBe(next.term);
    await Promise.race([watch, Bun.sleep(5_000)]);
    if (most > 1) console.error(logs().split("\n").filter((x) => /planner|leader|engine (added|ready|removal)/.test(x)).join("\n"));
    expect(most).toBeLessThanOrEqual(1); // the pool's max: no double start across the failover
    expect((await poolEngines(survivors)).length).toBeLessThanOrEqual(1);
  }, 150_000);
});
