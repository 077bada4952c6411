// On-demand LoRA adapters through herd to sim engines serving vLLM's runtime LoRA API: loaded where
// a request needs it, reused there, spread to a second engine when the holder is busy, evicted when
// an engine is full, unloaded when idle.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { startSimEngine, type SimEngine } from "../../src/engine/sim/server.ts";
import { MODEL, startHerd, type Herd } from "./harness.ts";

let sims: SimEngine[] = [];
let herd: Herd;

const adapters = async (s: SimEngine) =>
  ((await (await fetch(`${s.url}/v1/models`)).json()) as { data: { id: string }[] }).data.map((m) => m.id).filter((id) => id !== MODEL).sort();

beforeAll(async () => {
  // Real step timings (no time scale), so a 200-token stream stays in flight for about a second.
  sims = await Promise.all([1, 2].map((i) => startSimEngine({ port: 0, model: MODEL, runtimeLora: true, hashSeed: BigInt(i) })));
  herd = await startHerd({
    workers: sims.map((s, i) => ({ id: `w${i}`, url: s.url, kind: "sim" as const })),
    policy: "least-loaded",
    model: { lora_adapters: [{ name: "sql", path: "/models/sql", on_demand: true }, { name: "chat", path: "/models/chat", on_demand: true }] },
    frontend: { lora: { max_per_engine: 1, idle_ms: 300, spread_in_flight: 2 } },
  });
});
afterAll(async () => {
  await herd.stop();
  for (const s of sims) await s.stop();
});

const chat = (model: string, stream = false, max_tokens = 2) =>
  fetch(`${herd.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }], max_tokens, stream }) });

describe("on-demand LoRA adapters", () => {
  test("the sim serves vLLM's runtime API (only when enabled)", async () => {
    const off = await startSimEngine({ port: 0, model: MODEL, zeroDelay: true });
    try {
      expect((await fetch(`${off.url}/v1/load_lora_adapter`, { method: "POST", body: JSON.stringify({ lora_name: "x", lora_path: "/x" }) })).status).toBe(404);
    } finally {
      await off.stop();
    }
    const s = sims[0]!;
    const load = () => fetch(`${s.url}/v1/load_lora_adapter`, { method: "POST", body: JSON.stringify({ lora_name: "probe", lora_path: "/p" }) });
    const r = await load();
    expect(r.status).toBe(200);
    expect(await r.text()).toBe("Success: LoRA adapter 'probe' added successfully.");
    expect((await load()).status).toBe(400);
    const un = () => fetch(`${s.url}/v1/unload_lora_adapter`, { method: "POST", body: JSON.stringify({ lora_name: "probe" }) });
    expect((await un()).status).toBe(200);
    expect((await un()).status).toBe(404);
  });

  test("loaded on demand, reused, spread when the holder is busy, unloaded when idle", async () => {
    const first = await chat("sql");
    expect(first.status).toBe(200);
    await first.text();
    const home = first.headers.get("x-herd-worker")!;
    const homeSim = sims[Number(home.slice(1))]!;
    expect(await adapters(homeSim)).toEqual(["sql"]);
    const again = await chat("sql");
    expect(again.headers.get("x-herd-worker")).toBe(home);
    await again.text();
    // Two long streams keep the holder busy (spread_in_flight 2): the next one loads it elsewhere.
    const held = [await chat("sql", true, 200), await chat("sql", true, 200)];
    for (const h of held) expect(h.headers.get("x-herd-worker")).toBe(home);
    const spread = await chat("sql");
    expect(spread.status).toBe(200);
    expect(spread.headers.get("x-herd-worker")).not.toBe(home);
    await spread.text();
    expect(herd.frontend.lora.loaded()).toEqual({ w0: ["sql"], w1: ["sql"] });
    for (const h of held) await h.body?.cancel();
    // Idle for idle_ms (300): the sweep (every second) unloads it everywhere.
    for (let i = 0; i < 40 && (await Promise.all(sims.map(adapters))).flat().length > 0; i++) await Bun.sleep(100);
    expect((await Promise.all(sims.map(adapters))).flat()).toEqual([]);
  }, 30_000);

  test("a full engine (max_per_engine 1) gives up its idle adapter for the next one", async () => {
    const a = await chat("sql");
    await a.text();
    const w = a.headers.get("x-herd-worker")!;
    // Make that engine the least busy by loading the other one's... both idle: least-loaded picks by
    // in-flight, so send "chat" until it lands on w (at most a couple of tries).
    let landed = "";
    for (let i = 0; i < 4 && landed !== w; i++) {
      const b = await chat("chat");
      expect(b.status).toBe(200);
      await b.text();
      landed = b.headers.get("x-herd-worker")!;
    }
    expect(landed).toBe(w);
    const sim = sims[Number(w.slice(1))]!;
    for (let i = 0; i < 20 && (await adapters(sim)).includes("sql"); i++) await Bun.sleep(50);
    expect(await adapters(sim)).toEqual(["chat"]);
  });
});
