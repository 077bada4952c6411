// End to end: a key's budget shared by two `herd run` nodes (peers discovery, one sim engine each).
// A key with rpm N sends alternately to both nodes; in total ≈ N are accepted (docs/tenants.md
// "Counting across nodes": the leader's bucket leased out, never more than N plus the refill during
// the run, at most the nodes' undrawn leases fewer), every 429 carries OpenAI's headers, and the
// per-tenant metrics of the two nodes add up to what the client saw.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import { cleanup, HerdNodes, portBase, startHerd, tempDir } from "../helpers/herd.ts";

const NAMES = ["a", "b"] as const;
type Name = (typeof NAMES)[number];
const RPM = 30;
const KEY = "sk-quota-e2e";

let dir = "";
/** Before the nodes start: the leader's bucket cannot have begun refilling earlier. */
let tStart = 0;
const herds = new HerdNodes(NAMES, { logTailChars: 2500, waitMs: 30_000 });
const { procs: nodes, port, url, logs, waitFor } = herds;

function config(n: Name): string {
  return `node: { name: ${n}, data_dir: ${JSON.stringify(join(dir, n, "data"))} }
frontend:
  api_keys:
    - { name: team, key: ${KEY}, rpm: ${RPM} }
supervisor: { port_range_start: ${herds.base + 100 + 100 * NAMES.indexOf(n)}, health_interval_ms: 100, health_timeout_ms: 300 }
models:
  - { name: shared }
engines:
  - { kind: sim, model: shared, count: 1, args: ["--time-scale", "10"] }
cluster:
  discovery: peers
  token: e2e-quota-token
  peers: { seeds: ${JSON.stringify(NAMES.map((x) => `127.0.0.1:${port(x)}`))} }
`;
}

/** Sum of one metric's samples for tenant `team` across both nodes' /metrics. */
async function metric(name: string): Promise<number> {
  let sum = 0;
  for (const n of NAMES) {
    const text = await (await fetch(`${url(n)}/metrics`)).text();
    for (const line of text.split("\n")) if (line.startsWith(`${name}{`) && line.includes('tenant="team"')) sum += Number(line.split(" ").pop());
  }
  return sum;
}

describe("quotas counted across two nodes", () => {
  beforeAll(async () => {
    tStart = performance.now();
    herds.base = portBase();
    dir = tempDir("herd-quota-e2e-");
    await Promise.all(
      NAMES.map(async (n) => {
        mkdirSync(join(dir, n));
        nodes.set(n, await startHerd(join(dir, n), config(n), { args: ["--listen", `127.0.0.1:${port(n)}`], readyTimeoutMs: 40_000 }));
      }),
    );
    await waitFor("both nodes agree on a leader and see each other", async () => {
      const views: any[] = await Promise.all(NAMES.map(async (n) => (await fetch(`${url(n)}/admin/cluster`)).json()));
      return views.every((v) => v.leader !== null && v.leader === views[0].leader && v.nodes.filter((x: any) => x.state !== "dead").length === 2);
    });
    await Bun.sleep(1000); // a few quota rounds (every 250 ms): both nodes hold leases of the leader's bucket
  }, 90_000);
  afterAll(async () => {
    await Promise.all([...nodes.values()].map((h) => h.stop(5_000)));
    if (dir) cleanup(dir);
  });

  test(`rpm ${RPM} sent alternately to both nodes: ≈ ${RPM} accepted in total, 429s with OpenAI's headers`, async () => {
    const t0 = performance.now();
    let ok = 0;
    let limited = 0;
    const sent = 3 * RPM;
    let last429: Response | null = null;
    for (let i = 0; i < sent; i++) {
      const res = await fetch(`${url(NAMES[i % 2]!)}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", authorization: `Bearer ${KEY}` },
        body: JSON.stringify({ model: "shared", messages: [{ role: "user", content: `hi ${i}` }], max_tokens: 2 }),
      });
      if (res.status === 200) ok++;
      else if (res.status === 429) {
        limited++;
        last429 = res;
      } else throw new Error(`unexpected ${res.status}: ${await res.text()}`);
      if (res !== last429) await res.arrayBuffer();
      await Bun.sleep(20);
    }
    const elapsedS = (performance.now() - t0) / 1000;
    // The bucket refills from its first lease on (before t0, after tStart): bound it from tStart.
    const refill = Math.ceil((((performance.now() - tStart) / 1000) * RPM) / 60);
    console.log(`quota e2e: rpm ${RPM}, ${sent} sent alternately in ${elapsedS.toFixed(1)} s: ${ok} accepted, ${limited} refused (bound: ≤ ${RPM + refill}, ≥ ${RPM - RPM / 4})`);
    // Never above the limit plus the refill during the run (one node alone would have passed 2 × RPM).
    expect(ok).toBeLessThanOrEqual(RPM + refill);
    // At most the other node's undrawn lease (limit / (2 × nodes)) is stranded.
    expect(ok).toBeGreaterThanOrEqual(RPM - RPM / 4);
    expect(limited).toBe(sent - ok);
    expect(last429).not.toBeNull();
    const h = last429!.headers;
    expect(h.get("x-ratelimit-limit-requests")).toBe(String(RPM));
    expect(Number(h.get("x-ratelimit-remaining-requests"))).toBeGreaterThanOrEqual(0);
    expect(h.get("x-ratelimit-reset-requests")).toMatch(/^\d+(ms|(\.\d+)?s|m\d+s)$/);
    expect(Number(h.get("retry-after"))).toBeGreaterThanOrEqual(1);
    const body = (await last429!.json()) as { error: { type: string; code: string } };
    expect(body.error).toMatchObject({ type: "rate_limit_error", code: "rate_limit_exceeded" });
    // The per-tenant metrics of both nodes add up to what the client saw.
    expect(await metric("herd_tenant_requests_total")).toBe(ok);
    expect(await metric("herd_tenant_rate_limited_total")).toBe(limited);
  }, 120_000);
});
