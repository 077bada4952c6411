import { describe, expect, test } from "bun:test";
import { BenchInputError } from "../../src/workload/plan.ts";
import { meetsSlo, parseDuration, parseSlo, percentile, percentiles, type RequestRecord, summarize } from "../../src/workload/stats.ts";

function rec(over: Partial<RequestRecord>): RequestRecord {
  return {
    index: 0, session: "s", at_s: 0, start_s: 0, ttft_s: 0.1, itl_s: [0.01, 0.01], e2e_s: 0.2,
    prompt_tokens: 100, completion_tokens: 3, cached_tokens: null, error: null, ...over,
  };
}

describe("percentiles", () => {
  test("known inputs (numpy 'linear' definition)", () => {
    const xs = Array.from({ length: 100 }, (_, i) => i + 1); // 1..100
    // numpy.percentile(range(1,101), [50, 90, 95, 99]) = [50.5, 90.1, 95.05, 99.01]
    const p = percentiles(xs.slice().reverse())!;
    expect(p.p50).toBeCloseTo(50.5, 10);
    expect(p.p90).toBeCloseTo(90.1, 10);
    expect(p.p95).toBeCloseTo(95.05, 10);
    expect(p.p99).toBeCloseTo(99.01, 10);
    expect(p.mean).toBeCloseTo(50.5, 10);
    expect(p.max).toBe(100);
    expect(p.count).toBe(100);
    expect(percentile([7], 99)).toBe(7);
    expect(percentile([1, 2], 50)).toBe(1.5);
    expect(percentile([1, 2, 3, 4], 0)).toBe(1);
    expect(percentile([1, 2, 3, 4], 100)).toBe(4);
    // numpy.percentile([0.2, 0.1, 5, 0.3, 0.15], 95) = 4.06
    expect(percentiles([0.2, 0.1, 5, 0.3, 0.15])!.p95).toBeCloseTo(4.06, 10);
    expect(percentiles([])).toBeNull();
    expect(Number.isNaN(percentile([], 50))).toBe(true);
  });
});

describe("SLOs and goodput", () => {
  test("durations and SLO lists parse; bad ones are typed errors", () => {
    expect(parseDuration("2s")).toBe(2);
    expect(parseDuration("50ms")).toBeCloseTo(0.05, 12);
    expect(parseDuration("1.5")).toBe(1.5);
    expect(parseDuration("2m")).toBe(120);
    expect(parseSlo("ttft=2s,itl=50ms")).toEqual({ ttft_s: 2, itl_s: 0.05 });
    expect(parseSlo("tpot=20ms,e2e=10s")).toEqual({ itl_s: 0.02, e2e_s: 10 });
    for (const bad of ["ttft", "ttft=fast", "foo=1s"]) expect(() => parseSlo(bad)).toThrow(BenchInputError);
  });

  test("a request meets the SLO only if every bound holds; itl bounds the request's mean gap", () => {
    const slo = { ttft_s: 0.5, itl_s: 0.05 };
    expect(meetsSlo(rec({ ttft_s: 0.5, itl_s: [0.05, 0.05] }), slo)).toBe(true); // bounds are inclusive
    expect(meetsSlo(rec({ ttft_s: 0.51 }), slo)).toBe(false);
    expect(meetsSlo(rec({ itl_s: [0.01, 0.2] }), slo)).toBe(false); // mean 0.105
    expect(meetsSlo(rec({ itl_s: [0.01, 0.08] }), slo)).toBe(true); // mean 0.045; one slow gap is allowed
    expect(meetsSlo(rec({ error: "http_503", ttft_s: null, e2e_s: null }), slo)).toBe(false);
    expect(meetsSlo(rec({ e2e_s: 3 }), { e2e_s: 2 })).toBe(false);
    expect(meetsSlo(rec({}), {})).toBe(true);
  });

  test("summary of hand-made samples: goodput share and rate, errors by kind, warm-up, cached ratio, throughput", () => {
    const records: RequestRecord[] = [
      rec({ index: 0, start_s: 0, ttft_s: 9, e2e_s: 9.5 }), // warm-up: excluded everywhere
      rec({ index: 1, start_s: 1, ttft_s: 0.2, e2e_s: 1, itl_s: [0.02, 0.03], completion_tokens: 10, prompt_tokens: 100, cached_tokens: 50 }),
      rec({ index: 2, start_s: 2, ttft_s: 0.4, e2e_s: 1, itl_s: [0.02], completion_tokens: 10, prompt_tokens: 100, cached_tokens: 0 }),
      rec({ index: 3, start_s: 3, ttft_s: 3, e2e_s: 4, itl_s: [0.01], completion_tokens: 20, prompt_tokens: 200, cached_tokens: 150 }), // misses ttft
      rec({ index: 4, start_s: 4, ttft_s: 0.1, e2e_s: 2, itl_s: [0.2, 0.2], completion_tokens: 10, prompt_tokens: 100, cached_tokens: 100 }), // misses itl
      rec({ index: 5, start_s: 5, ttft_s: null, e2e_s: null, itl_s: [], error: "http_503", prompt_tokens: null, completion_tokens: null }),
      rec({ index: 6, start_s: 5.5, ttft_s: null, e2e_s: null, itl_s: [], error: "http_503", prompt_tokens: null, completion_tokens: null }),
      rec({ index: 7, start_s: 6, ttft_s: 0.3, e2e_s: 1, itl_s: [], error: "stream_error" }),
    ];
    const s = summarize(records, { warmup_s: 0.5, slo: { ttft_s: 1, itl_s: 0.05 } });
    expect(s.requests).toEqual({ sent: 8, measured: 7, completed: 4, failed: 3, warmup_excluded: 1 });
    expect(s.errors).toEqual({ total: 3, by_kind: { http_503: 2, stream_error: 1 } });
    expect(s.goodput.requests).toBe(2);
    expect(s.goodput.share).toBeCloseTo(2 / 7, 12);
    // window: first measured send (1 s) to last measured finish (max(3+4, 6+1) = 7 s) = 6 s
    expect(s.duration_s).toBeCloseTo(6, 12);
    expect(s.goodput.requests_per_s).toBeCloseTo(2 / 6, 12);
    expect(s.throughput.requests_per_s).toBeCloseTo(4 / 6, 12);
    expect(s.throughput.tokens_per_s).toBeCloseTo(50 / 6, 12);
    expect(s.tokens).toEqual({ input: 500, output: 50, cached: 300 });
    expect(s.cached_tokens_ratio).toBeCloseTo(300 / 500, 12);
    expect(s.ttft!.p50).toBeCloseTo(0.3, 12); // [0.1, 0.2, 0.4, 3]
    expect(s.itl!.count).toBe(6);
    expect(s.e2e!.max).toBe(4);
  });

  test("no cached_tokens reported → ratio null; nothing measured → zeros, no NaN", () => {
    expect(summarize([rec({})], { warmup_s: 0, slo: {} }).cached_tokens_ratio).toBeNull();
    const empty = summarize([], { warmup_s: 0, slo: {} });
    expect(empty.throughput).toEqual({ requests_per_s: 0, tokens_per_s: 0, input_tokens_per_s: 0 });
    expect(empty.goodput.share).toBe(0);
    expect(empty.ttft).toBeNull();
  });
});
