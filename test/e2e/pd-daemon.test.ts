// End to end P/D (issue 13): `herd run` as a subprocess with, per model, 2 prefill + 2 decode sim
// engines that speak vLLM's NixlConnector contract (kv_transfer_params, held blocks, side-channel
// pull over TCP), driven by the official `openai` client. One herd, three models, each with its own
// fault knobs on the sim command line:
//   pd   clean engines: streaming and non-streaming answers through both legs; a short prompt skips
//        the prefill pool (decider, in metrics); a client disconnect aborts the decode leg;
//   pdf  both prefill engines answer every prefill leg 500: retry on the other prefill worker, then
//        local prefill on a decode worker; the client gets a full answer;
//   pdt  every KV pull is cut off halfway, decode engines run kv_load_failure_policy recompute: the
//        decode recomputes the prompt and answers in full;
//   pdx  the same cut-off pulls, decode engines with kv_load_failure_policy fail (their own
//        --kv-transfer-config, which wins over herd's): each decode answers 200 and then an error
//        event first; herd takes that for a failure before the first token, retries the other
//        decode worker, redoes the prefill once, and then gives the client a clean 502.
// Every request has a client timeout and every test a bound: a hang fails, it never waits.
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import OpenAI from "openai";
import { cleanup, portBase, startHerd, tempDir, waitFor, type HerdProc } from "../helpers/herd.ts";

let herd: HerdProc | null = null;
let dir = "";
let url = "";

const cluster = async (): Promise<any> => (await fetch(`${url}/admin/cluster`)).json();
const metricsText = async () => (await fetch(`${url}/metrics`)).text();
const client = () => new OpenAI({ baseURL: `${url}/v1`, apiKey: "none", maxRetries: 0, timeout: 15_000 });
/** ~300 prompt tokens by herd's estimate (chars / 4): above min_prefill_tokens 64. */
const LONG = `Summarise this: ${"the quick brown fox jumps over the lazy dog ".repeat(28)}`;
const FAIL_POLICY = JSON.stringify({ kv_connector: "NixlConnector", kv_role: "kv_both", kv_load_failure_policy: "fail" });
const SIM = ["--time-scale", "4", "--output-len", "0", "--kv-bytes-per-block", "4096"];

const entries = (model: string, prefillArgs: string[], decodeArgs: string[]) => `
  - { kind: sim, model: ${model}, role: prefill, count: 2, args: ${JSON.stringify([...SIM, ...prefillArgs])} }
  - { kind: sim, model: ${model}, role: decode, count: 2, args: ${JSON.stringify([...SIM, ...decodeArgs])} }`;

function counter(text: string, name: string, labels: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${name}{${labels}}`));
  return line ? Number(line.split(" ").pop()) : 0;
}

async function workersOf(model: string, role: string): Promise<any[]> {
  return (await cluster()).workers.filter((w: any) => w.model === model && w.role === role);
}

async function simMetric(workerUrl: string, name: string, labels = ""): Promise<number> {
  return counter(await (await fetch(`${workerUrl}/metrics`)).text(), name, labels);
}

beforeAll(async () => {
  dir = tempDir("herd-pd-e2e-");
  herd = await startHerd(
    dir,
    `node: { name: pde2e, data_dir: ${JSON.stringify(join(dir, "data"))} }
frontend: { drain_timeout_ms: 2000, first_token_timeout_ms: 8000, idle_timeout_ms: 5000 }
router: { policy: round-robin, metrics_scrape_interval_ms: 200 }
supervisor: { port_range_start: ${portBase()}, health_interval_ms: 100, health_timeout_ms: 300 }
pd: { min_prefill_tokens: 64, nixl_metadata: herd, kv_load_failure_policy: recompute }
models: [{ name: pd }, { name: pdf }, { name: pdt }, { name: pdx }]
engines:${entries("pd", [], [])}${entries("pdf", ["--pd-prefill-fail-rate", "1"], [])}${entries("pdt", ["--kv-transfer-fail-rate", "1"], [])}${entries("pdx", ["--kv-transfer-fail-rate", "1"], ["--kv-transfer-config", FAIL_POLICY])}
`,
  );
  url = herd.url;
  await waitFor("all 16 workers ready", async () => {
    const ws = (await cluster()).workers;
    return ws.length === 16 && ws.every((w: any) => w.state === "ready");
  }, 30_000, herd.log);
}, 45_000);

afterAll(async () => {
  await herd?.stop(5_000);
  if (dir) cleanup(dir);
});

describe("P/D through herd run", () => {
  test("engines got their role flags, side-channel ports and herd's NIXL metadata endpoint", () => {
    const log = herd!.log();
    expect(log).toMatch(/P\/D pde2e\/sim-0: NIXL side channel \d+/);
    expect(log).toMatch(/NIXL metadata service \(NIXL_TCPSTORE_ENDPOINT\): 127\.0\.0\.1:\d+/);
    const ports = [...log.matchAll(/NIXL side channel (\d+)/g)].map((m) => Number(m[1]));
    expect(ports.length).toBe(16);
    expect(new Set(ports).size).toBe(16);
  });

  test("non-streaming and streaming answers run prefill then decode; the decode uses the pulled blocks", async () => {
    const c = client();
    const before = await metricsText();
    const r = await c.chat.completions.create({ model: "pd", messages: [{ role: "user", content: LONG }], max_tokens: 6 });
    expect(r.usage!.completion_tokens).toBe(6);
    expect(r.choices[0]!.message.content!.length).toBeGreaterThan(0);
    // The decode engine counted the transferred prompt blocks as cached (sim: pulled blocks are hits).
    expect(r.usage!.prompt_tokens_details?.cached_tokens ?? 0).toBeGreaterThan(0);
    const s = await c.chat.completions.create({ model: "pd", messages: [{ role: "user", content: LONG }], max_tokens: 7, stream: true, stream_options: { include_usage: true } });
    let pieces = 0;
    let usage: any = null;
    for await (const ch of s) {
      if (ch.choices[0]?.delta.content) pieces++;
      if (ch.usage) usage = ch.usage;
    }
    expect(pieces).toBeGreaterThan(0);
    expect(usage.completion_tokens).toBe(7);
    const after = await metricsText();
    expect(counter(after, "herd_pd_decisions_total", 'reason="disaggregated"') - counter(before, "herd_pd_decisions_total", 'reason="disaggregated"')).toBe(2);
    expect(counter(after, "herd_pd_pairs_total", 'prefill_node="pde2e",decode_node="pde2e"')).toBeGreaterThanOrEqual(2);
    expect(after).toMatch(/herd_pd_prefill_seconds_count \d+/);
    // Both prefill engines of `pd` together served the two pulls, successfully.
    let served = 0;
    for (const w of await workersOf("pd", "prefill")) served += await simMetric(w.url, "sim_kv_transfers_served_total", 'result="ok"');
    expect(served).toBe(2);
    // Explain shows both legs' terms (a fresh prompt: a decode engine that holds a prompt's blocks
    // makes its uncached part short, and the decider then keeps it local); the traces show the two
    // legs each request ran.
    const fresh = "Explain: " + "lorem ipsum dolor sit amet ".repeat(40);
    const ex: any = await (await fetch(`${url}/admin/route/explain`, { method: "POST", body: JSON.stringify({ model: "pd", messages: [{ role: "user", content: fresh }] }) })).json();
    expect(ex.policy).toBe("pd");
    expect(ex.decision.reason).toBe("disaggregated");
    // Each leg as its preset chose it: the dry run of the real sequence, the candidates' terms.
    expect(ex.legs.map((l: any) => `${l.name}:${l.policy}`)).toEqual(["prefill:pd-prefill", "decode:pd-decode"]);
    expect(ex.legs[0].candidates.length).toBe(2);
    expect(ex.legs[0].candidates.map((c: any) => c.worker)).toContain(ex.legs[0].chosen);
    expect(ex.legs[0].candidates[0].terms).toHaveProperty("kv_cost");
    expect(ex.legs[1].candidates.length).toBe(2);
    expect(ex.legs[1].candidates[0].terms).toHaveProperty("decode_blocks");
    const { traces }: any = await (await fetch(`${url}/admin/pd/traces`)).json();
    const last = traces.at(-1).trace;
    expect(last.legs.map((l: any) => `${l.name}:${l.outcome}:${l.decision.policy}`)).toEqual(["prefill:done:pd-prefill", "decode:committed:pd-decode"]);
  }, 20_000);

  test("a short prompt skips the prefill pool (decider), visible in metrics", async () => {
    const before = counter(await metricsText(), "herd_pd_decisions_total", 'reason="short_uncached_prompt"');
    const r = await client().chat.completions.create({ model: "pd", messages: [{ role: "user", content: "hi" }], max_tokens: 3 });
    expect(r.usage!.completion_tokens).toBe(3);
    expect(counter(await metricsText(), "herd_pd_decisions_total", 'reason="short_uncached_prompt"')).toBe(before + 1);
  }, 15_000);

  test("prefill fails on both prefill workers: one retry elsewhere, then local prefill on a decode worker", async () => {
    const r = await client().chat.completions.create({ model: "pdf", messages: [{ role: "user", content: LONG }], max_tokens: 5 });
    expect(r.usage!.completion_tokens).toBe(5);
    const m = await metricsText();
    expect(counter(m, "herd_pd_fallbacks_total", 'reason="prefill_retry"')).toBe(1);
    expect(counter(m, "herd_pd_fallbacks_total", 'reason="prefill_failed_local"')).toBe(1);
  }, 15_000);

  test("a cut-off KV transfer with kv_load_failure_policy recompute: the decode recomputes and answers in full", async () => {
    const s = await client().chat.completions.create({ model: "pdt", messages: [{ role: "user", content: LONG }], max_tokens: 6, stream: true, stream_options: { include_usage: true } });
    let usage: any = null;
    for await (const ch of s) if (ch.usage) usage = ch.usage;
    expect(usage.completion_tokens).toBe(6);
    expect(usage.prompt_tokens_details?.cached_tokens ?? 0).toBe(0); // nothing came over: recomputed
    let failed = 0;
    for (const w of await workersOf("pdt", "prefill")) failed += await simMetric(w.url, "sim_kv_transfers_served_total", 'result="failed"');
    expect(failed).toBe(1);
  }, 15_000);

  test("decode engines with kv_load_failure_policy fail: an error event first is a failure; retry, redo, then a clean 502", async () => {
    const before = await metricsText();
    const t0 = performance.now();
    let status = 0;
    try {
      const s = await client().chat.completions.create({ model: "pdx", messages: [{ role: "user", content: LONG }], max_tokens: 5, stream: true });
      for await (const _ of s) {
        // nothing may arrive: no leg committed
      }
    } catch (e) {
      status = (e as { status?: number }).status ?? -1;
    }
    expect(status).toBe(502);
    expect(performance.now() - t0).toBeLessThan(10_000);
    const m = await metricsText();
    const delta = (labels: string) => counter(m, "herd_pd_fallbacks_total", labels) - counter(before, "herd_pd_fallbacks_total", labels);
    expect(delta('reason="decode_retry"')).toBe(2);
    expect(delta('reason="decode_redo_prefill"')).toBe(1);
    const { traces }: any = await (await fetch(`${url}/admin/pd/traces`)).json();
    expect(traces.at(-1).trace.legs.map((l: any) => `${l.name}:${l.outcome}`)).toEqual(["prefill:done", "decode:failed", "decode:failed", "prefill:done", "decode:failed", "decode:failed"]);
  }, 15_000);

  test("a client disconnect mid-stream aborts the decode leg; nothing stays in flight", async () => {
    const ac = new AbortController();
    const s = await client().chat.completions.create({ model: "pd", messages: [{ role: "user", content: LONG }], max_tokens: 20_000, stream: true }, { signal: ac.signal });
    let got = 0;
    // The openai client ends the iteration quietly when its own signal aborts it.
    for await (const ch of s) if (ch.choices[0]?.delta.content && ++got === 2) ac.abort();
    expect(got).toBe(2);
    await waitFor("herd counted the client's disconnect mid-stream", async () => counter(await metricsText(), "herd_client_aborts_total", 'model="pd",phase="streaming"') === 1, 5_000, herd!.log);
    await waitFor("herd's in-flight back to 0 and the decode engines idle", async () => {
      const ws = await workersOf("pd", "decode");
      if (!ws.every((w: any) => w.load.in_flight === 0)) return false;
      for (const w of ws) if ((await simMetric(w.url, "vllm:num_requests_running", 'model_name="pd"')) !== 0) return false;
      return true;
    }, 5_000, herd!.log);
  }, 15_000);
});
