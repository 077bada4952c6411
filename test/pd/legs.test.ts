import { describe, expect, test } from "bun:test";
import { SeededRng } from "../../src/core/rng.ts";
import { decideDisagg } from "../../src/pd/decider.ts";
import { bootstrapHost, bootstrapRoom, kvTransferParamsOf, sglangPdBody, vllmDecodeBody, vllmPrefillBody } from "../../src/pd/legs.ts";

describe("vLLM legs (toy_proxy_server.py)", () => {
  const client = { model: "m", messages: [{ role: "user", content: "hi" }], stream: true, stream_options: { include_usage: true }, max_tokens: 200, max_completion_tokens: 200, min_tokens: 5 };

  test("the prefill leg asks for one unstreamed token and remote decode", () => {
    expect(vllmPrefillBody(client)).toEqual({
      model: "m", messages: [{ role: "user", content: "hi" }], stream: false, max_tokens: 1, max_completion_tokens: 1,
      kv_transfer_params: { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null },
    });
    expect("max_completion_tokens" in vllmPrefillBody({ model: "m", prompt: "x" })).toBe(false);
    expect(client.stream).toBe(true); // the client's body is not touched
  });

  test("the decode leg is the client's body with the prefill answer's params verbatim", () => {
    const params = { do_remote_prefill: true, do_remote_decode: false, remote_block_ids: [[1, 2]], remote_engine_id: "e", remote_host: "10.0.0.1", remote_port: 5600, tp_size: 1, extra_future_field: { x: 1 } };
    expect(kvTransferParamsOf({ id: "cmpl", kv_transfer_params: params })).toBe(params);
    expect(kvTransferParamsOf({ id: "cmpl" })).toBeNull();
    expect(kvTransferParamsOf({ kv_transfer_params: [1] })).toBeNull();
    expect(vllmDecodeBody(client, params)).toEqual({ ...client, kv_transfer_params: params });
    expect("kv_transfer_params" in vllmDecodeBody({ ...client, kv_transfer_params: { x: 1 } }, null)).toBe(false);
  });
});

describe("SGLang legs (mini_lb.py)", () => {
  test("one body with bootstrap host, port and a 63-bit room rendered exactly", () => {
    const room = (1n << 62n) + 12345n;
    const text = sglangPdBody({ model: "m", prompt: "p" }, "http://10.0.0.7:30000", 8998, room);
    expect(text).toBe(`{"model":"m","prompt":"p","bootstrap_host":"10.0.0.7","bootstrap_port":8998,"bootstrap_room":${room}}`);
    expect(bootstrapHost("http://[::1]:30000")).toBe("[::1]");
  });

  test("rooms are in [0, 2^63 - 1] and reproducible for a seed", () => {
    const a = new SeededRng(3);
    const b = new SeededRng(3);
    for (let i = 0; i < 1000; i++) {
      const r = bootstrapRoom(a);
      expect(r).toBe(bootstrapRoom(b));
      expect(r >= 0n && r < 1n << 63n).toBe(true);
    }
  });
});

describe("conditional disaggregation", () => {
  const cfg = { min_prefill_tokens: 512, prefill_queue_max: 8 };
  test.each([
    [{ uncachedTokens: 4000, prefillQueue: [1, 3] }, true, "disaggregated"],
    [{ uncachedTokens: 100, prefillQueue: [0] }, false, "short_uncached_prompt"],
    [{ uncachedTokens: 4000, prefillQueue: [8, 9] }, false, "prefill_saturated"],
    [{ uncachedTokens: 4000, prefillQueue: [] }, false, "no_prefill_worker"],
    [{ uncachedTokens: 512, prefillQueue: [7] }, true, "disaggregated"],
  ] as const)("%j → %s (%s)", (input, yes, reason) => {
    const d = decideDisagg(input, cfg);
    expect(d.disaggregate).toBe(yes);
    expect(d.reason).toBe(reason);
    expect(d.terms.min_prefill_tokens).toBe(512);
  });
});
