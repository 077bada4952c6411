// `herd run` with the planner on and a pool that scales from zero: herd is ready with no engine, a
// request for the empty pool is held at the frontend's gate (the planner is poked at once), answered
// once an engine is up, and the pool goes back to zero when idle. Through the official openai client.
import { afterAll, describe, expect, test } from "bun:test";
import OpenAI from "openai";
import { join } from "node:path";
import { cleanup, startHerd, tempDir, waitFor, type HerdProc } from "../helpers/herd.ts";

describe("planner in herd run: 0 → 1 → 0 with a held request", () => {
  const dir = tempDir("herd-planner-e2e-");
  let herd: HerdProc | null = null;
  afterAll(async () => {
    await herd?.stop();
    cleanup(dir);
  });

  test("a held request is answered after a cold start; idle, the pool returns to zero", async () => {
    const port = 26_000 + Math.floor(Math.random() * 5_000);
    herd = await startHerd(dir, `node: { data_dir: ${JSON.stringify(join(dir, "data"))} }
router: { policy: least-loaded }
models: [{ name: herd-sim, path: herd-sim }]
engines:
  - { kind: sim, model: herd-sim, count: 1, args: ["--time-scale", "10"] }
supervisor: { port_range_start: ${port} }
planner:
  enabled: true
  tick_ms: 200
  stable_window_ms: 1000
  panic_window_ms: 400
  down_window_ms: 2000
  down_step_ms: 500
  up_hold_ms: 500
  idle_to_sleep_ms: 2000
  hold_timeout_ms: 30000
  pools: [{ engine: 0, min: 0, max: 1, prefill_tokens_per_s: 1000, decode_tokens_per_s: 100 }]
`);
    const workers = async () => ((await (await fetch(`${herd!.url}/admin/cluster`)).json()) as { workers: { state: string }[] }).workers;
    expect((await workers()).filter((w) => w.state === "ready")).toHaveLength(0);
    const client = new OpenAI({ baseURL: `${herd.url}/v1`, apiKey: "none", maxRetries: 0, timeout: 40_000 });
    const t0 = performance.now();
    const r = await client.chat.completions.create({ model: "herd-sim", messages: [{ role: "user", content: "wake up" }], max_tokens: 4 });
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    console.error(`planner e2e: held request answered after ${Math.round(performance.now() - t0)} ms (cold start of a sim engine)`);
    await waitFor("the pool back at zero", async () => (await workers()).every((w) => w.state !== "ready"), 30_000, herd.log);
    const view = (await (await fetch(`${herd.url}/admin/planner`)).json()) as { pools: { pool: string }[] };
    expect(view.pools.map((p) => p.pool)).toEqual(["herd-sim/aggregated"]);
  }, 90_000);
});
