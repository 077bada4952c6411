// The simulated engine's NixlConnector contract, two engines in one process (the two-process test
// with the official client is test/pd/sim-pd.test.ts).
import { afterEach, describe, expect, test } from "bun:test";
import { parseKvTransferConfig, kvParamsIntent } from "../../../src/engine/sim/kv-transfer-config.ts";
import { parseSimArgs, UsageError } from "../../../src/engine/sim/options.ts";
import { type SimEngine, type StartSimEngineOptions, startSimEngine } from "../../../src/engine/sim/server.ts";
import { kvTransferParamsOf, vllmDecodeBody, vllmPrefillBody } from "../../../src/pd/legs.ts";
import { RealClock } from "../../../src/core/clock.ts";
import { pullBlocks } from "../../../src/engine/sim/kv-side-channel.ts";

const started: SimEngine[] = [];
afterEach(async () => {
  for (const e of started.splice(0)) await e.stop();
});

const kvConfig = (role: string, extra: Record<string, unknown> = {}, policy = "fail") =>
  parseKvTransferConfig(JSON.stringify({ kv_connector: "NixlConnector", kv_role: role, kv_load_failure_policy: policy, kv_connector_extra_config: extra }));

async function engine(role: string, over: StartSimEngineOptions = {}, extra: Record<string, unknown> = {}, policy = "fail"): Promise<SimEngine> {
  const e = await startSimEngine({ port: 0, timeScale: 50, kvTransfer: kvConfig(role, extra, policy), sideChannelHost: "127.0.0.1", sideChannelPort: 0, seed: 1, ...over });
  started.push(e);
  return e;
}

const post = (url: string, body: unknown) =>
  fetch(`${url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", "x-request-id": "req-1" }, body: JSON.stringify(body) });

// 200 prompt tokens → 12 full blocks of 16.
const PROMPT = Array.from({ length: 200 }, (_, i) => 1000 + i);
const client = { model: "sim", prompt: PROMPT, max_tokens: 8, ignore_eos: true };

async function prefill(p: SimEngine): Promise<Record<string, unknown>> {
  const r = await post(p.url, vllmPrefillBody(client));
  expect(r.status).toBe(200);
  const answer = (await r.json()) as { choices: { finish_reason: string }[]; usage: { completion_tokens: number } };
  expect(answer.choices[0]!.finish_reason).toBe("length");
  expect(answer.usage.completion_tokens).toBe(1);
  const params = kvTransferParamsOf(answer);
  expect(params).not.toBeNull();
  return params!;
}

const metric = async (e: SimEngine, name: string) => {
  const text = await (await fetch(`${e.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(name + " ") || l.startsWith(name + "{"));
  return line === undefined ? NaN : Number(line.split(" ").at(-1));
};

describe("--kv-transfer-config", () => {
  test("vLLM's JSON: role, policy, engine id (a UUID when absent), lease default 30 s", () => {
    const c = parseKvTransferConfig('{"kv_connector":"NixlConnector","kv_role":"kv_both"}');
    expect(c).toMatchObject({ role: "kv_both", loadFailurePolicy: "fail", leaseDurationS: 30 });
    expect(c.engineId).toMatch(/^[0-9a-f-]{36}$/);
    const d = parseKvTransferConfig('{"kv_connector":"NixlConnector","kv_role":"kv_consumer","engine_id":"e1","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"backends":["UCX"],"kv_lease_duration":5}}');
    expect(d).toEqual({ connector: "NixlConnector", role: "kv_consumer", engineId: "e1", loadFailurePolicy: "recompute", leaseDurationS: 5 });
    expect(() => parseSimArgs(["--kv-transfer-config", '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'])).toThrow(UsageError);
    expect(() => parseSimArgs(["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_load_failure_policy":"retry"}'])).toThrow(/kv_load_failure_policy/);
    expect(parseSimArgs(["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}', "--kv-transfer-fail-rate", "0.5"])?.kvTransferFailRate).toBe(0.5);
    expect(() => parseSimArgs(["--pd-prefill-fail-rate", "2"])).toThrow(/at most 1/);
  });

  test("request intents: remote decode, remote prefill (flat or per-group block ids), invalid", () => {
    expect(kvParamsIntent({ kv_transfer_params: { do_remote_decode: true } }).kind).toBe("remote_decode");
    const i = kvParamsIntent({ kv_transfer_params: { do_remote_prefill: true, remote_block_ids: [[1, 2], [3]], remote_engine_id: "e", remote_host: "h", remote_port: 1, remote_request_id: "r" } });
    expect(i).toEqual({ kind: "remote_prefill", remote: { engineId: "e", requestId: "r", host: "h", port: 1, blockIds: [1, 2, 3] } });
    expect(kvParamsIntent({ kv_transfer_params: [1] }).kind).toBe("invalid");
    expect(kvParamsIntent({}).kind).toBe("none");
  });
});

describe("prefill → decode through the side channel", () => {
  test("the prefill answer carries vLLM's kv_transfer_params and holds the full prompt blocks", async () => {
    const p = await engine("kv_producer");
    const params = await prefill(p);
    expect(Object.keys(params).sort()).toEqual(["do_remote_decode", "do_remote_prefill", "remote_block_ids", "remote_engine_id", "remote_host", "remote_num_tokens", "remote_port", "remote_request_id", "tp_size"]);
    expect(params).toMatchObject({ do_remote_prefill: true, do_remote_decode: false, remote_engine_id: p.pd!.engineId, remote_host: "127.0.0.1", remote_port: p.pd!.port, tp_size: 1, remote_num_tokens: 200 });
    expect((params.remote_block_ids as number[][])[0]).toHaveLength(12);
    expect(p.pd!.server.heldRequests).toBe(1);
    expect(await metric(p, "sim_kv_held_blocks")).toBe(12);
    // 12 held of the pool; a plain request releases its blocks, a held one keeps them referenced.
    expect(p.stats().numBlocks - p.stats().freeBlocks).toBe(12);
  });

  test("the decode engine pulls the bytes, counts them as cached, and the prefill side frees them", async () => {
    const p = await engine("kv_producer", { kvBytesPerBlock: 4096 });
    const d = await engine("kv_consumer");
    const params = await prefill(p);
    const r = await post(d.url, vllmDecodeBody(client, params));
    expect(r.status).toBe(200);
    const a = (await r.json()) as { usage: { completion_tokens: number; prompt_tokens_details: { cached_tokens: number } }; kv_transfer_params: unknown };
    expect(a.usage.completion_tokens).toBe(8);
    expect(a.usage.prompt_tokens_details.cached_tokens).toBe(192); // 12 blocks × 16
    expect(a.kv_transfer_params).toBeNull();
    expect(p.pd!.server.heldRequests).toBe(0);
    expect(p.stats().freeBlocks).toBe(p.stats().numBlocks);
    expect(await metric(d, "sim_kv_pull_bytes_total")).toBe(12 * 4096);
    expect(await metric(p, 'sim_kv_transfers_served_total{result="ok"}')).toBe(1);
    // The decode engine released its transfer reference when the request ended.
    expect(d.stats().freeBlocks).toBe(d.stats().numBlocks);
    // A second pull of the same params finds nothing held.
    const again = await post(d.url, vllmDecodeBody(client, params));
    expect(again.status).toBe(500);
    expect(await again.text()).toContain("not held");
  });

  test("a paced side channel makes the transfer take real time", async () => {
    // 12 blocks × 8 KiB at 400 KiB/s ≈ 240 ms.
    const p = await engine("kv_producer", { kvBytesPerBlock: 8192, kvTransferBytesPerS: 400 * 1024 });
    const d = await engine("kv_consumer");
    const params = await prefill(p);
    const t0 = performance.now();
    const r = await post(d.url, vllmDecodeBody(client, params));
    expect(r.status).toBe(200);
    expect(performance.now() - t0).toBeGreaterThan(200); // wide bound: pacing only slows it down
  });

  test("a streamed decode answer after the pull", async () => {
    const p = await engine("kv_producer");
    const d = await engine("kv_consumer");
    const params = await prefill(p);
    const r = await post(d.url, vllmDecodeBody({ ...client, stream: true, stream_options: { include_usage: true } }, params));
    const text = await r.text();
    expect(text).toContain('"cached_tokens":192');
    expect(text.trim().endsWith("data: [DONE]")).toBe(true);
  });
});

describe("faults and failure policies", () => {
  test("--pd-prefill-fail-rate 1: the prefill leg gets a 500", async () => {
    const p = await engine("kv_producer", { pdPrefillFailRate: 1 });
    expect((await post(p.url, vllmPrefillBody(client))).status).toBe(500);
    expect(await metric(p, "sim_pd_prefill_failures_total")).toBe(1);
  });

  test("a cut-off transfer: policy fail errors the request (500, or an error event in a stream); the prefill side keeps holding", async () => {
    const p = await engine("kv_producer", { kvTransferFailRate: 1 });
    const d = await engine("kv_consumer");
    const params = await prefill(p);
    const r = await post(d.url, vllmDecodeBody(client, params));
    expect(r.status).toBe(500);
    expect(await r.text()).toContain("cut off");
    const s = await post(d.url, vllmDecodeBody({ ...client, stream: true }, params));
    expect(s.status).toBe(200);
    expect(await s.text()).toContain('"error"');
    expect(p.pd!.server.heldRequests).toBe(1);
    expect(d.stats().freeBlocks).toBe(d.stats().numBlocks);
  });

  test("policy recompute: a failed load prefills locally (no cached tokens)", async () => {
    const p = await engine("kv_producer", { kvLeaseExpireRate: 1 });
    const d = await engine("kv_consumer", {}, {}, "recompute");
    const params = await prefill(p);
    const r = await post(d.url, vllmDecodeBody(client, params));
    expect(r.status).toBe(200);
    const a = (await r.json()) as { usage: { completion_tokens: number; prompt_tokens_details: { cached_tokens: number } } };
    expect(a.usage.completion_tokens).toBe(8);
    expect(a.usage.prompt_tokens_details.cached_tokens).toBe(0);
    expect(await metric(p, "sim_kv_lease_expired_total")).toBe(1);
  });

  test("kv_lease_duration: blocks nobody pulls are freed when the lease ends, and counted", async () => {
    const p = await engine("kv_producer", {}, { kv_lease_duration: 0.2 });
    await prefill(p);
    expect(p.pd!.server.heldRequests).toBe(1);
    for (let i = 0; i < 100 && p.pd!.server.heldRequests > 0; i++) await Bun.sleep(20);
    expect(p.pd!.server.heldRequests).toBe(0);
    expect(p.stats().freeBlocks).toBe(p.stats().numBlocks);
    expect(await metric(p, "sim_kv_lease_expired_total")).toBe(1);
  });

  test("a prompt shorter than one block holds nothing; the decode runs a full prefill", async () => {
    const p = await engine("kv_producer");
    const d = await engine("kv_consumer");
    const short = { ...client, prompt: [5, 6, 7] };
    const a = (await (await post(p.url, vllmPrefillBody(short))).json()) as Record<string, unknown>;
    const params = kvTransferParamsOf(a)!;
    expect(params.remote_block_ids).toEqual([[]]);
    expect(p.pd!.server.heldRequests).toBe(0);
    expect((await post(d.url, vllmDecodeBody(short, params))).status).toBe(200);
  });

  test("an engine without --kv-transfer-config ignores kv_transfer_params (no connector)", async () => {
    const e = await startSimEngine({ port: 0, timeScale: 50 });
    started.push(e);
    const a = (await (await post(e.url, vllmPrefillBody(client))).json()) as Record<string, unknown>;
    expect(a.kv_transfer_params).toBeNull();
    expect(e.stats().freeBlocks).toBe(e.stats().numBlocks);
  });

  test("side channel: a wrong engine id and a second concurrent pull are refused; the first pull still completes", async () => {
    const p = await engine("kv_producer", { kvBytesPerBlock: 4096, kvTransferBytesPerS: 200 * 1024 });
    const params = await prefill(p);
    const base = { host: "127.0.0.1", port: p.pd!.port, requestId: params.remote_request_id as string, blockIds: (params.remote_block_ids as number[][])[0]!, clock: new RealClock(), timeoutMs: 5000 };
    await expect(pullBlocks({ ...base, engineId: "someone-else" })).rejects.toThrow(/engine id mismatch/);
    const first = pullBlocks({ ...base, engineId: p.pd!.engineId }); // 48 KiB at 200 KiB/s ≈ 240 ms
    await Bun.sleep(50);
    await expect(pullBlocks({ ...base, engineId: p.pd!.engineId })).rejects.toThrow(/another pull in progress/);
    expect(await first).toBe(12 * 4096);
    expect(p.pd!.server.heldRequests).toBe(0);
  });

  test("a pull that times out gives up with a clean error (the prefill side keeps the blocks)", async () => {
    const p = await engine("kv_producer", { kvBytesPerBlock: 64 * 1024, kvTransferBytesPerS: 64 * 1024 });
    const params = await prefill(p);
    const pull = pullBlocks({ host: "127.0.0.1", port: p.pd!.port, engineId: p.pd!.engineId, requestId: params.remote_request_id as string, blockIds: [], clock: new RealClock(), timeoutMs: 150 });
    await expect(pull).rejects.toThrow(/timed out after 150 ms/);
    for (let i = 0; i < 50 && p.pd!.server.heldRequests === 0; i++) await Bun.sleep(10);
    expect(p.pd!.server.heldRequests).toBe(1);
  });
});
