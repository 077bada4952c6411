// End to end P/D in SGLang's flow (issue 19): `herd run` as a subprocess whose prefill sim engines
// carry SGLang's --disaggregation-mode (src/pd/flow.ts: their model then runs SGLang's flow, and
// herd launches both roles with SGLang's flags and a bootstrap port per prefill engine), driven by
// the official `openai` client. herd sends both legs at once with one body carrying
// bootstrap_host/bootstrap_port/bootstrap_room, as sgl-router's PD mode does; the prefill sim holds
// the prompt's blocks under the room on its bootstrap port, the decode sim waits for the room, pulls
// them and answers with them cached. Two models:
//   sg   clean engines: non-streaming and streaming answers through both legs at once;
//   sgf  both prefill engines answer every prefill 500: each pair's decode is aborted, the pair
//        moves once, then a local prefill on a decode worker answers in full.
// Every request has a client timeout and every test a bound: a hang fails, it never waits.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { cleanup, portBase, startHerd, tempDir, waitFor, type HerdProc } from "../helpers/herd.ts";

let herd: HerdProc | null = null;
let dir = "";
let url = "";

const cluster = async (): Promise<any> => (await fetch(`${url}/admin/cluster`)).json();
const client = () => new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0, timeout: 15_000 });
/** ~300 prompt tokens by herd's estimate (chars / 4): above min_prefill_tokens 64. */
const LONG = `Summarise this: ${"the quick brown fox jumps over the lazy dog ".repeat(28)}`;
const SIM = ["--time-scale", "4", "--output-len", "0", "--kv-bytes-per-block", "4096"];

const entries = (model: string, prefillArgs: string[]) => `
  - { kind: sim, model: ${model}, role: prefill, count: 2, args: ${JSON.stringify([...SIM, "--disaggregation-mode", "prefill", ...prefillArgs])} }
  - { kind: sim, model: ${model}, role: decode, count: 2, args: ${JSON.stringify(SIM)} }`;

const traces = async (): Promise<any[]> => ((await (await fetch(`${url}/admin/pd/traces`)).json()) as { traces: any[] }).traces;

beforeAll(async () => {
  dir = tempDir("herd-pd-sglang-");
  herd = await startHerd(
    dir,
    `node: { name: sge2e, data_dir: ${JSON.stringify(join(dir, "data"))} }
frontend: { drain_timeout_ms: 2000, first_token_timeout_ms: 8000, idle_timeout_ms: 5000 }
router: { policy: round-robin, metrics_scrape_interval_ms: 200 }
supervisor: { port_range_start: ${portBase()}, health_interval_ms: 100, health_timeout_ms: 300 }
pd: { min_prefill_tokens: 64, nixl_metadata: herd }
models: [{ name: sg }, { name: sgf }]
engines:${entries("sg", [])}${entries("sgf", ["--pd-prefill-fail-rate", "1"])}
`,
  );
  url = herd.url;
  await waitFor("all 8 workers ready", async () => {
    const ws = (await cluster()).workers;
    return ws.length === 8 && ws.every((w: any) => w.state === "ready");
  }, 30_000, herd.log);
}, 45_000);

afterAll(async () => {
  await herd?.stop(5_000);
  if (dir) cleanup(dir);
});

describe("SGLang's P/D flow through herd run", () => {
  test("prefill engines got SGLang's flags and a bootstrap port each; no NIXL side channel", () => {
    const log = herd!.log();
    const ports = [...log.matchAll(/SGLang bootstrap (\d+) \(--disaggregation-bootstrap-port\)/g)].map((m) => Number(m[1]));
    expect(ports.length).toBe(4);
    expect(new Set(ports).size).toBe(4);
    expect(log).not.toMatch(/NIXL side channel/);
  });

  test("non-streaming and streaming answers: both legs at once, the decode answers with the prefill's blocks cached", async () => {
    const c = client();
    const r = await c.chat.completions.create({ model: "sg", messages: [{ role: "user", content: LONG }], max_tokens: 6 });
    expect(r.usage!.completion_tokens).toBe(6);
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    expect(r.usage!.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThan(0);
    const s = await c.chat.completions.create({ model: "sg", messages: [{ role: "user", content: LONG }], max_tokens: 7, stream: true, stream_options: { include_usage: true } });
    let pieces = 0;
    let usage: any = null;
    for await (const ch of s) {
      if (ch.choices[0]?.delta.content) pieces++;
      if (ch.usage) usage = ch.usage;
    }
    expect(pieces).toBeGreaterThan(0);
    expect(usage.completion_tokens).toBe(7);
    expect(usage.prompt_tokens_details.cached_tokens).toBeGreaterThan(0);
    const last = (await traces()).filter((t) => t.trace.flow === "sglang").slice(-2);
    expect(last.length).toBe(2);
    for (const t of last) {
      // The decode leg answers once the prefill finished computing the prompt: both started together.
      const [p, d] = [t.trace.legs.find((l: any) => l.name === "prefill"), t.trace.legs.find((l: any) => l.name === "decode")];
      expect(d.outcome).toBe("committed");
      expect(Math.abs(p.startMs - d.startMs)).toBeLessThan(50);
      expect([p.decision.policy, d.decision.policy]).toEqual(["pd-prefill", "pd-decode"]);
    }
    // Explain runs the same sequence dry: SGLang's flow, both legs by their presets.
    const ex: any = await (await fetch(`${url}/admin/route/explain`, { method: "POST", body: JSON.stringify({ model: "sg", messages: [{ role: "user", content: "Explain: " + "lorem ipsum dolor sit amet ".repeat(40) }] }) })).json();
    expect(ex.flow).toBe("sglang");
    expect(ex.legs.map((l: any) => l.name)).toEqual(["prefill", "decode"]);
  }, 20_000);

  test("every prefill fails: each pair's decode is aborted, the pair moves once, then a local prefill answers in full", async () => {
    const r = await client().chat.completions.create({ model: "sgf", messages: [{ role: "user", content: LONG }], max_tokens: 5 });
    expect(r.usage!.completion_tokens).toBe(5);
    const t = (await traces()).at(-1).trace;
    expect(t.flow).toBe("sglang");
    expect(t.fallbacks).toEqual(["prefill_retry", "prefill_failed_local"]);
    expect(t.legs.filter((l: any) => l.name === "prefill").map((l: any) => l.outcome)).toEqual(["failed", "failed"]);
    expect(t.legs.at(-1)).toMatchObject({ name: "local", outcome: "committed" });
    // Nothing stays in flight on any worker.
    await waitFor("no request in flight", async () => (await cluster()).workers.every((w: any) => w.load.in_flight === 0), 5_000, herd!.log);
  }, 20_000);
});
