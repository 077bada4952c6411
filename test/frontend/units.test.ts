// Pure parts: SSE scanner, request validation/stripping, auth helpers, metrics restart counter.
import { describe, expect, test } from "bun:test";
import { SseScanner, chunkHasToken, sseErrorEvent } from "../../src/request/sse.ts";
import { checkRequest, isInternalKey } from "../../src/protocol/openai.ts";
import { KeySet, isLoopback, isLoopbackHost } from "../../src/http/auth.ts";
import { HerdMetrics } from "../../src/metrics/herd-metrics.ts";
import { emptyLoad, type Worker } from "../../src/workers/worker.ts";
import { HerdError } from "../../src/core/errors.ts";

const enc = (s: string) => new TextEncoder().encode(s);

describe("SseScanner", () => {
  test("Responses streams: a delta is the first token, response.completed the end, with or without event: lines", () => {
    const enc = new TextEncoder();
    for (const named of [true, false]) {
      const s = new SseScanner();
      const ev = (type: string, rest: string) => enc.encode(`${named ? `event: ${type}\n` : ""}data: {${rest}"type":"${type}"}\n\n`);
      s.push(ev("response.created", `"response":{"id":"resp_1","output":[]},`));
      expect(s.sawToken).toBe(false);
      // Generated text that mentions the end type is not the end (its quotes are escaped).
      expect(s.push(ev("response.output_text.delta", `"delta":"\\"type\\":\\"response.completed\\"",`))).toBe(true);
      expect(s.ended).toBe(false);
      s.push(ev("response.completed", `"response":{"id":"resp_1","usage":{"input_tokens_details":{"cached_tokens":7}}},`));
      expect(s.ended).toBe(true);
      expect(s.cachedTokens).toBe(7);
    }
  });

  test("role-only chunk is not a token; content is; events split across chunks are reassembled", () => {
    const s = new SseScanner();
    expect(s.push(enc('data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'))).toBe(false);
    expect(s.push(enc('data: {"choices":[{"index":0,"delta":{"con'))).toBe(false);
    expect(s.push(enc('tent":"hi"},"finish_reason":null}]}\n'))).toBe(false);
    expect(s.push(enc("\n"))).toBe(true);
    expect(s.sawToken).toBe(true);
    expect(s.ended).toBe(false);
    s.push(enc("data: [DO"));
    expect(s.sawDone).toBe(false);
    s.push(enc("NE]\n\n"));
    expect(s.sawDone).toBe(true);
    expect(s.ended).toBe(true);
  });

  test("CRLF line ends (also split between chunks) are understood", () => {
    const s = new SseScanner();
    s.push(enc('data: {"choices":[{"index":0,"text":"a","finish_reason":null}]}\r'));
    expect(s.push(enc("\n\r\n"))).toBe(true);
    s.push(enc("data: [DONE]\r\n\r\n"));
    expect(s.sawDone).toBe(true);
  });

  test("multi-byte UTF-8 split across chunks does not break parsing", () => {
    const s = new SseScanner();
    const bytes = enc('data: {"choices":[{"index":0,"text":"日本","finish_reason":null}]}\n\n');
    const cut = bytes.indexOf(0xe6) + 1; // inside the first character
    s.push(bytes.slice(0, cut));
    expect(s.push(bytes.slice(cut))).toBe(true);
  });

  test("upstream error event ends the stream; completions text and finish_reason count as output", () => {
    const s = new SseScanner();
    s.push(enc('data: {"error":{"message":"x","type":"server_error","code":500}}\n\n'));
    expect(s.sawError).toBe(true);
    expect(s.ended).toBe(true);
    expect(chunkHasToken({ choices: [{ text: "a" }] })).toBe(true);
    expect(chunkHasToken({ choices: [{ delta: {}, finish_reason: "stop" }] })).toBe(true);
    expect(chunkHasToken({ choices: [], usage: { prompt_tokens: 1 } })).toBe(false);
    expect(chunkHasToken({ choices: [{ delta: { tool_calls: [{ index: 0 }] } }] })).toBe(true);
  });

  test("error event is OpenAI-shaped SSE", () => {
    const t = new TextDecoder().decode(sseErrorEvent("boom", "upstream_reset"));
    expect(t.endsWith("\n\n")).toBe(true);
    expect(JSON.parse(t.slice(6))).toEqual({ error: { message: "boom", type: "server_error", param: null, code: "upstream_reset" } });
  });
});

describe("checkRequest", () => {
  test("strips internal keys and keeps the rest; the original object is untouched", () => {
    const body = { model: "m", messages: [{ role: "user", content: "abcd" }], kv_transfer_params: {}, decode_addr: "x", stream: true, user: "u" };
    const c = checkRequest("chat", body);
    expect(c.stripped.sort()).toEqual(["decode_addr", "kv_transfer_params"]);
    expect(Object.keys(c.body).sort()).toEqual(["messages", "model", "stream", "user"]);
    expect(body).toHaveProperty("kv_transfer_params");
    expect(c.stream).toBe(true);
    expect(c.promptChars).toBe(4);
  });

  test("internal key rule does not catch ordinary OpenAI fields", () => {
    for (const k of ["model", "messages", "max_tokens", "stream_options", "response_format", "tools", "tool_choice", "logit_bias", "user", "seed", "stop", "n", "logprobs", "top_logprobs", "metadata", "store", "parallel_tool_calls", "prediction", "service_tier", "reasoning_effort", "ignore_eos", "cache_salt"])
      expect(isInternalKey(k)).toBe(false);
    for (const k of ["bootstrap_host", "prefill_url", "target_hosts", "remote_addr", "worker_endpoint", "decode_port"]) expect(isInternalKey(k)).toBe(true);
  });

  test("prompt forms and errors carry the field name", () => {
    expect(checkRequest("completions", { model: "m", prompt: ["ab", "c"] }).promptChars).toBe(3);
    expect(checkRequest("completions", { model: "m", prompt: [1, 2, 3] }).promptChars).toBe(12);
    expect(checkRequest("completions", { model: "m", prompt: [[1], [2, 3]] }).promptChars).toBe(12);
    const err = (() => {
      try {
        checkRequest("chat", { model: "m", messages: [{ role: "user", content: 5 }] });
      } catch (e) {
        return e;
      }
    })() as HerdError;
    expect(err).toBeInstanceOf(HerdError);
    expect(err.status).toBe(400);
    expect(err.param).toBe("messages[0].content");
  });
});

describe("auth helpers", () => {
  test("KeySet accepts only exact Bearer keys", () => {
    const k = new KeySet(["abc", ""]);
    expect(k.enabled).toBe(true);
    expect(k.accepts("Bearer abc")).toBe(true);
    expect(k.accepts("bearer  abc ")).toBe(true);
    expect(k.accepts("Bearer ab")).toBe(false);
    expect(k.accepts("abc")).toBe(false);
    expect(k.accepts(null)).toBe(false);
    expect(new KeySet([""]).enabled).toBe(false);
  });

  test("loopback addresses and Host headers", () => {
    for (const ip of ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"]) expect(isLoopback(ip)).toBe(true);
    for (const ip of ["10.0.0.1", "::ffff:10.0.0.1", "fe80::1", "", null]) expect(isLoopback(ip)).toBe(false);
    for (const h of ["localhost:8000", "127.0.0.1", "[::1]:8000", "LOCALHOST"]) expect(isLoopbackHost(h)).toBe(true);
    for (const h of ["evil.example", "127.0.0.1.evil.example", "10.0.0.1:8000", "localhost.evil.example"]) expect(isLoopbackHost(h)).toBe(false);
  });
});

describe("HerdMetrics", () => {
  test("engine restarts become a monotonic counter; unknown models are bucketed", async () => {
    const w: Worker = { id: "n/sim-0", node: "n", model: "m", role: "aggregated", kind: "sim", url: "http://x", state: "ready", load: emptyLoad(), restarts: 0 };
    const m = new HerdMetrics(["m"], () => [w]);
    expect(await m.render()).toContain('herd_engine_restarts_total{worker="n/sim-0"} 0');
    w.restarts = 2;
    expect(await m.render()).toContain('herd_engine_restarts_total{worker="n/sim-0"} 2');
    w.restarts = 3;
    expect(await m.render()).toContain('herd_engine_restarts_total{worker="n/sim-0"} 3');
    m.request("attacker-chosen-model-name", null, 404);
    const text = await m.render();
    expect(text).toContain('herd_requests_total{model="unknown",worker="",status="404"} 1');
    expect(text).not.toContain("attacker-chosen");
    // A second instance has its own registry: no "already registered" clash.
    expect(() => new HerdMetrics(["m"], () => [])).not.toThrow();
  });
});
