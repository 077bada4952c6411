// End to end P/D split across two nodes (issue 13): two `herd run` processes on loopback form a
// `peers` cluster with a token; node `pa` runs the 2 prefill sim engines of model `m`, node `pb` the
// 2 decode sim engines (both list `m`: same block size and tokenizer). Neither config alone has
// prefill and decode engines, so the P/D plan comes from the cluster-wide registry, per request.
// Covers, through the official `openai` client:
//   - a request entering either node, non-streaming and streaming, prefills on pa and decodes on
//     pb: each remote leg goes through its node's peer API, the decode sim pulls the blocks from
//     the prefill sim's side channel (127.0.0.1, the nodes' advertise), /admin/pd/traces names both
//     workers with their nodes, and the prefill engines counted the pulls they served;
//   - explain on the entry node lists the remote prefill workers' terms;
//   - pa dies (herd and its engines, no goodbye): requests entering pb are still answered in full,
//     by a local prefill on a decode worker (first the remote prefill fails and is retried, then
//     once pa's workers have left pb's registry the decider finds no prefill worker); never a hang;
//   - pa restarts and pairs again; then pb dies: requests entering pa get a clean 502/503 (no
//     worker can decode), never a hang, and no prefill runs once pb's workers are gone.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { cleanup, HerdNodes, portBase, startHerd, tempDir } from "../helpers/herd.ts";

const TOKEN = "e2e-pd-cluster-token";
const NAMES = ["pa", "pb"] as const;
type Name = (typeof NAMES)[number];

let dir = "";
const herds = new HerdNodes(NAMES, { logTailChars: 2500, waitMs: 10_000 });
const { procs: nodes, port, url, logs, waitFor } = herds;
const get = async (n: Name, path: string): Promise<any> => (await fetch(`${url(n)}${path}`, { signal: AbortSignal.timeout(2000) })).json();
const metricsText = async (n: Name) => (await fetch(`${url(n)}/metrics`, { signal: AbortSignal.timeout(2000) })).text();
const client = (n: Name) => new OpenAI({ baseURL: `${url(n)}/v1`, apiKey: "none", maxRetries: 0, timeout: 10_000 });
/** ~300 prompt tokens by herd's estimate: above min_prefill_tokens 64. */
const long = (tag: string) => `Summarise ${tag}: ${"the quick brown fox jumps over the lazy dog ".repeat(28)}`;
const SIM = ["--time-scale", "4", "--output-len", "0", "--kv-bytes-per-block", "4096"];

function counter(text: string, name: string, labels: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}}`));
  return line ? Number(line.split(" ").pop()) : 0;
}

function config(n: Name): string {
  const role = n === "pa" ? "prefill" : "decode";
  return `node: { name: ${n}, advertise: 127.0.0.1, data_dir: ${JSON.stringify(join(dir, n, "data"))} }
frontend: { drain_timeout_ms: 2000, first_token_timeout_ms: 4000, idle_timeout_ms: 5000 }
router: { policy: round-robin, metrics_scrape_interval_ms: 200 }
supervisor: { port_range_start: ${herds.base + 100 + 100 * NAMES.indexOf(n)}, health_interval_ms: 100, health_timeout_ms: 300 }
pd: { min_prefill_tokens: 64, nixl_metadata: herd, kv_load_failure_policy: recompute }
models: [{ name: m }]
engines:
  - { kind: sim, model: m, role: ${role}, count: 2, args: ${JSON.stringify(SIM)} }
cluster:
  discovery: peers
  token: ${TOKEN}
  peers: { seeds: ${JSON.stringify(NAMES.map((x) => `127.0.0.1:${port(x)}`))} }
`;
}

const workers = async (n: Name): Promise<any[]> => (await get(n, "/admin/cluster")).workers;

beforeAll(async () => {
  herds.base = portBase();
  dir = tempDir("herd-pd-cluster-e2e-");
  await Promise.all(
    NAMES.map(async (n) => {
      mkdirSync(join(dir, n));
      nodes.set(n, await startHerd(join(dir, n), config(n), { args: ["--listen", `127.0.0.1:${port(n)}`], readyTimeoutMs: 30_000 }));
    }),
  );
  for (const n of NAMES)
    await waitFor(`${n} sees all 4 workers ready`, async () => {
      const ws = await workers(n);
      return ws.length === 4 && ws.every((w) => w.state === "ready");
    }, 20_000);
}, 45_000);

afterAll(async () => {
  await Promise.all([...nodes.values()].map((h) => h.stop(5_000)));
  if (dir) cleanup(dir);
});

async function lastTrace(n: Name): Promise<any> {
  const { traces }: any = await get(n, "/admin/pd/traces");
  return traces.at(-1).trace;
}

describe("P/D across two nodes (prefill on pa, decode on pb)", () => {
  for (const entry of NAMES)
    test(`a request entering ${entry}: prefill on pa, decode on pb, streaming and not`, async () => {
      const c = client(entry);
      const r = await c.chat.completions.create({ model: "m", messages: [{ role: "user", content: long(`${entry}-1`) }], max_tokens: 6 });
      expect(r.usage!.completion_tokens).toBe(6);
      expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
      // The decode sim counted the blocks it pulled from pa's prefill sim as cached.
      expect(r.usage!.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThan(0);
      let t = await lastTrace(entry);
      expect(t.decision.reason).toBe("disaggregated");
      expect(t.legs.map((l: any) => `${l.name}@${l.node}:${l.outcome}`)).toEqual(["prefill@pa:done", "decode@pb:committed"]);

      const s = await c.chat.completions.create({ model: "m", messages: [{ role: "user", content: long(`${entry}-2`) }], max_tokens: 7, stream: true, stream_options: { include_usage: true } });
      let pieces = 0;
      let usage: any = null;
      for await (const ch of s) {
        if (ch.choices[0]?.delta.content) pieces++;
        if (ch.usage) usage = ch.usage;
      }
      expect(pieces).toBeGreaterThan(0);
      expect(usage.completion_tokens).toBe(7);
      expect(usage.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThan(0);
      t = await lastTrace(entry);
      expect(t.legs.map((l: any) => `${l.name}@${l.node}:${l.outcome}`)).toEqual(["prefill@pa:done", "decode@pb:committed"]);
      expect(counter(await metricsText(entry), "herd_pd_pairs_total", 'prefill_node="pa",decode_node="pb"')).toBe(2);
    }, 15_000);

  test("the prefill engines on pa served every pull, and explain on pb lists pa's prefill workers", async () => {
    let served = 0;
    for (const w of (await workers("pa")).filter((x) => x.role === "prefill")) {
      const text = await (await fetch(`${w.url}/metrics`)).text();
      served += counter(text, "sim_kv_transfers_served_total", 'result="ok"');
    }
    expect(served).toBe(4);
    const ex: any = await (await fetch(`${url("pb")}/admin/route/explain`, { method: "POST", body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "Explain: " + "lorem ipsum dolor sit amet ".repeat(40) }] }) })).json();
    expect(ex.policy).toBe("pd");
    expect(ex.decision.reason).toBe("disaggregated");
    expect(ex.legs.map((l: any) => l.name)).toEqual(["prefill", "decode"]);
    expect(ex.legs[0].candidates.map((e: any) => e.node)).toEqual(["pa", "pa"]);
    expect(ex.legs[1].candidates.map((e: any) => e.node)).toEqual(["pb", "pb"]);
  }, 10_000);

  test("pa dies: requests entering pb are answered by a local prefill on a decode worker, never a hang", async () => {
    const pids: number[] = (await workers("pa")).filter((w) => w.node === "pa" && w.pid).map((w) => w.pid);
    expect(pids.length).toBe(2);
    nodes.get("pa")!.proc.kill("SIGKILL");
    for (const p of pids) process.kill(p, "SIGKILL");
    // Right away (pa's workers still in pb's registry): the remote prefill fails, is retried once,
    // then the decode worker prefills locally.
    const t0 = performance.now();
    const r = await client("pb").chat.completions.create({ model: "m", messages: [{ role: "user", content: long("after-kill-1") }], max_tokens: 5 });
    expect(r.usage!.completion_tokens).toBe(5);
    expect(performance.now() - t0).toBeLessThan(9_000);
    const t = await lastTrace("pb");
    // Either the remote prefill failed (retried, then local), or pa had already left the view.
    expect(t.fallbacks.includes("prefill_failed_local") || t.decision.reason === "no_prefill_worker").toBe(true);
    console.log(`[pd-cluster] first request after pa died: ${(performance.now() - t0).toFixed(0)} ms, decision ${t.decision.reason}, legs ${t.legs.map((l: any) => `${l.name}@${l.node}:${l.outcome}`).join(" ")}`);
    expect(t.legs.at(-1).name).toBe("local");
    expect(t.legs.at(-1).node).toBe("pb");
    expect(t.legs.at(-1).outcome).toBe("committed");
    // Once pa's workers are gone from pb's view: no prefill worker, the decider keeps it local.
    await waitFor("pb drops pa's workers", async () => !(await workers("pb")).some((w) => w.node === "pa"), 8_000);
    const s = await client("pb").chat.completions.create({ model: "m", messages: [{ role: "user", content: long("after-kill-2") }], max_tokens: 4, stream: true, stream_options: { include_usage: true } });
    let usage: any = null;
    for await (const ch of s) if (ch.usage) usage = ch.usage;
    expect(usage.completion_tokens).toBe(4);
    const t2 = await lastTrace("pb");
    expect(t2.decision.reason).toBe("no_prefill_worker");
    expect(t2.legs.map((l: any) => `${l.name}@${l.node}:${l.outcome}`)).toEqual(["local@pb:committed"]);
  }, 20_000);

  test("pa comes back and pairs again; then pb (every decode worker) dies: requests entering pa get a clean error, never a hang", async () => {
    nodes.set("pa", await startHerd(join(dir, "pa"), config("pa"), { args: ["--listen", `127.0.0.1:${port("pa")}`], readyTimeoutMs: 15_000 }));
    await waitFor("pb sees pa's prefill workers ready again", async () => (await workers("pb")).filter((w) => w.node === "pa" && w.state === "ready").length === 2);
    await waitFor("pa sees pb's decode workers ready", async () => (await workers("pa")).filter((w) => w.node === "pb" && w.state === "ready").length === 2);
    const r = await client("pa").chat.completions.create({ model: "m", messages: [{ role: "user", content: long("rejoined") }], max_tokens: 3 });
    expect(r.usage!.completion_tokens).toBe(3);
    expect((await lastTrace("pa")).legs.map((l: any) => `${l.name}@${l.node}:${l.outcome}`)).toEqual(["prefill@pa:done", "decode@pb:committed"]);

    const pids: number[] = (await workers("pb")).filter((w) => w.node === "pb" && w.pid).map((w) => w.pid);
    expect(pids.length).toBe(2);
    nodes.get("pb")!.proc.kill("SIGKILL");
    for (const p of pids) process.kill(p, "SIGKILL");
    const status = async (tag: string): Promise<number> => {
      try {
        await client("pa").chat.completions.create({ model: "m", messages: [{ role: "user", content: long(tag) }], max_tokens: 3 });
        return 200;
      } catch (e) {
        return (e as { status?: number }).status ?? -1;
      }
    };
    // pb's workers still in pa's view: the decode legs cannot reach pb, retried, redone, then 502.
    const t0 = performance.now();
    expect([502, 503]).toContain(await status("decode-gone-1"));
    expect(performance.now() - t0).toBeLessThan(9_000);
    // Once they are gone: no worker can decode, a 503 at once (no prefill leg runs).
    await waitFor("pa drops pb's workers", async () => !(await workers("pa")).some((w) => w.node === "pb"), 8_000);
    expect(await status("decode-gone-2")).toBe(503);
    const t = await lastTrace("pa");
    expect(t.legs).toEqual([]);
  }, 30_000);
});
