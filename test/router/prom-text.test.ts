import { describe, expect, test } from "bun:test";
import { parsePromText } from "../../src/engine/telemetry/prom-text.ts";
import { engineLoad, ENGINE_LOAD_METRICS } from "../../src/engine/telemetry/engine-load.ts";
import { SeededRng } from "../../src/core/rng.ts";
import { sglangMetrics, vllmMetrics } from "./exposition.ts";

describe("parsePromText", () => {
  test("names, labels and values of a vLLM exposition", () => {
    const { samples, malformed } = parsePromText(vllmMetrics({ running: 3, waiting: 1, kv: 0.4213 }));
    expect(malformed).toBe(0);
    expect(samples.find((s) => s.name === "vllm:num_requests_running")).toEqual({
      name: "vllm:num_requests_running",
      labels: { engine: "0", model_name: "Qwen/Qwen3-8B" },
      value: 3,
    });
    const inf = samples.find((s) => s.name === "vllm:time_to_first_token_seconds_bucket" && s.labels.le === "+Inf");
    expect(inf?.value).toBe(121);
    expect(samples.find((s) => s.name === "process_virtual_memory_bytes")?.value).toBe(3.2178176e10);
    expect(samples.find((s) => s.name === "vllm:cache_config_info")?.labels.num_gpu_blocks).toBe("27104");
  });

  test("special values, timestamps, escapes, spacing, CRLF and trailing commas", () => {
    const text = [
      'a_nan NaN',
      'b_inf{x="1"} +Inf 1700000000000',
      "c_neg -Inf",
      'd{path="C:\\\\dir",msg="say \\"hi\\"\\nbye",} 1.5e-3',
      "e\t  7  ",
      "f{} 2\r",
      "g .5",
    ].join("\n");
    const { samples, malformed } = parsePromText(text);
    expect(malformed).toBe(0);
    const v = Object.fromEntries(samples.map((s) => [s.name, s.value]));
    expect(Number.isNaN(v.a_nan)).toBe(true);
    expect(v).toMatchObject({ b_inf: Infinity, c_neg: -Infinity, d: 0.0015, e: 7, f: 2, g: 0.5 });
    expect(samples.find((s) => s.name === "d")?.labels).toEqual({ path: "C:\\dir", msg: 'say "hi"\nbye' });
  });

  test("junk lines are skipped and counted, never thrown on", () => {
    const text = [
      "<html>502 Bad Gateway</html>",
      "good 1",
      'unterminated{a="x 1',
      "no_value",
      "bad_value abc",
      "too many fields 1 2 3",
      "{novalue} 1",
      '9starts_with_digit 1',
      'x{a=unquoted} 1',
      "# a comment with {braces}",
      "ok_after 2",
    ].join("\n");
    const { samples, malformed } = parsePromText(text);
    expect(samples.map((s) => s.name)).toEqual(["good", "ok_after"]);
    expect(malformed).toBe(8);
  });

  test("random bytes never throw", () => {
    const rng = new SeededRng(13);
    const alphabet = 'abc:_{}="\\ \n\t,0123456789.+-eENaInf#';
    for (let i = 0; i < 2000; i++) {
      let s = "";
      for (let j = rng.int(200); j > 0; j--) s += alphabet[rng.int(alphabet.length)];
      const r = parsePromText(s);
      expect(r.samples.length + r.malformed).toBeLessThanOrEqual(s.split("\n").length);
    }
  });

  test("bounds: maxSamples truncates, over-long lines are junk, names filter skips the rest", () => {
    const many = Array.from({ length: 500 }, (_, i) => `m${i} ${i}`).join("\n");
    expect(parsePromText(many, { maxSamples: 10 })).toMatchObject({ truncated: true });
    expect(parsePromText(many, { maxSamples: 10 }).samples.length).toBe(10);
    expect(parsePromText(`long{a="${"x".repeat(1000)}"} 1`, { maxLineChars: 100 }).malformed).toBe(1);
    const filtered = parsePromText(vllmMetrics({ running: 1, waiting: 2, kv: 0.5 }), { names: ENGINE_LOAD_METRICS });
    expect(new Set(filtered.samples.map((s) => s.name))).toEqual(
      new Set(["vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]),
    );
  });

  test("the names fast path finds exactly what the full parse finds", () => {
    const names = new Set(["vllm:num_requests_running", "vllm:kv_cache_usage_perc", "python_gc_objects_collected_total"]);
    for (const text of [vllmMetrics({ running: 2, waiting: 1, kv: 0.5, engines: 3 }), sglangMetrics({ running: 1, queued: 1, tokenUsage: 0 })]) {
      const full = parsePromText(text).samples.filter((s) => names.has(s.name));
      expect(parsePromText(text, { names }).samples).toEqual(full);
    }
    // A wanted name that is a prefix of another metric, at the very start and without a trailing newline.
    const tricky = "m_total 1\nm 2\nm_bucket{le=\"1\"} 3\n# m 9\nm{a=\"b\"} 4";
    expect(parsePromText(tricky, { names: new Set(["m"]) }).samples.map((s) => s.value)).toEqual([2, 4]);
    expect(parsePromText(tricky, { names: new Set(["m_total"]) }).samples.map((s) => s.value)).toEqual([1]);
  });

  test("a __proto__ label cannot pollute objects", () => {
    const { samples } = parsePromText('m{__proto__="x",a="1"} 1');
    expect(samples[0]!.labels).toEqual({ a: "1" });
    expect(({} as Record<string, unknown>).x).toBeUndefined();
  });
});

describe("engineLoad", () => {
  const load = (text: string) => engineLoad(parsePromText(text).samples);

  test("vLLM", () => {
    expect(load(vllmMetrics({ running: 3, waiting: 1, kv: 0.25 }))).toEqual({ running: 3, waiting: 1, kv_usage: 0.25 });
  });

  test("vLLM with data-parallel engines: counts summed, KV usage averaged", () => {
    const text = vllmMetrics({ running: 2, waiting: 1, kv: 0.5, engines: 4 });
    expect(load(text)).toEqual({ running: 8, waiting: 4, kv_usage: 0.5 });
  });

  test("older vLLM: vllm:gpu_cache_usage_perc", () => {
    expect(load(vllmMetrics({ running: 0, waiting: 0, kv: 0.75, oldKvName: true }))).toEqual({ running: 0, waiting: 0, kv_usage: 0.75 });
  });

  test("SGLang names, with dp ranks", () => {
    expect(load(sglangMetrics({ running: 5, queued: 2, tokenUsage: 0.31 }))).toEqual({ running: 5, waiting: 2, kv_usage: 0.31 });
    expect(load(sglangMetrics({ running: 5, queued: 2, tokenUsage: 0.3, dpRanks: 2 }))).toEqual({ running: 10, waiting: 4, kv_usage: 0.3 });
  });

  test("SGLang tensor-parallel ranks report the same requests: only rank 0 counts", () => {
    expect(load(sglangMetrics({ running: 5, queued: 2, tokenUsage: 0.3, dpRanks: 2, tpRanks: 4 }))).toEqual({ running: 10, waiting: 4, kv_usage: 0.3 });
    const prio = 'sglang:num_queue_reqs{model_name="m",priority="0"} 2\nsglang:num_queue_reqs{model_name="m",priority="1"} 3\n';
    expect(load(prio)).toEqual({ running: null, waiting: 5, kv_usage: null });
  });

  test("nothing known → null; NaN and negative gauges are ignored", () => {
    expect(load("process_cpu_seconds_total 1.0\n")).toBeNull();
    expect(load('vllm:num_requests_running{engine="0"} NaN\nvllm:num_requests_waiting{engine="0"} -1\n')).toBeNull();
  });
});

test("reads the simulated engine's own /metrics (prom-client output)", async () => {
  const { SimMetrics } = await import("../../src/engine/sim/metrics.ts");
  const stats = { running: 7, waiting: 3, kvUsage: 0.625, numBlocks: 100, freeBlocks: 37, cachedBlocks: 5, prefixQueries: 10, prefixHits: 4, promptTokens: 50, generationTokens: 20, preemptions: 0, steps: 9 };
  const m = new SimMetrics("qwen3-8b", () => stats, { blockSize: 16, numBlocks: 100 });
  const text = await m.registry.metrics();
  expect(engineLoad(parsePromText(text, { names: ENGINE_LOAD_METRICS }).samples)).toEqual({ running: 7, waiting: 3, kv_usage: 0.625 });
  expect(parsePromText(text).malformed).toBe(0);
});
