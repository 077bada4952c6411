import { describe, expect, test } from "bun:test";
import { niceMax, niceTicks, type PlotRun, renderSvg } from "../../src/bench/svg.ts";

const run = (rate: number, scale: number, empty = false): PlotRun => ({
  load: { rate, concurrency: null },
  ttft_s: empty ? [] : Array.from({ length: 200 }, (_, i) => (0.02 + i * 0.001) * scale),
  itl_s: empty ? [] : Array.from({ length: 500 }, (_, i) => 0.005 + (i % 50) * 0.0002),
  e2e_s: empty ? [] : Array.from({ length: 200 }, (_, i) => 1 + i * 0.01 * scale),
  ttft_p95_s: empty ? null : 0.21 * scale,
  goodput_rps: empty ? 0 : rate * 0.9,
  throughput_rps: empty ? 0 : rate,
});

describe("svg", () => {
  test("axis ticks are round and the axis top covers the data", () => {
    expect(niceTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceMax(16)).toBe(20);
    expect(niceMax(2.6)).toBe(3);
    expect(niceMax(0)).toBe(1);
    for (const hi of [0.0137, 0.9, 7, 123, 4567]) expect(niceMax(hi)).toBeGreaterThanOrEqual(hi);
  });

  test("a sweep renders CDFs and load panels with finite coordinates only; empty runs do not break it", () => {
    for (const runs of [[run(2, 1), run(4, 2), run(8, 5)], [run(2, 1)], [run(2, 1, true), run(4, 1, true)]]) {
      const svg = renderSvg(runs, "t <&> \"q\"");
      expect(svg.startsWith(`<?xml version="1.0" encoding="UTF-8"?>\n<svg xmlns="http://www.w3.org/2000/svg"`)).toBe(true);
      expect(svg.trimEnd().endsWith("</svg>")).toBe(true);
      expect(svg).not.toMatch(/NaN|Infinity|undefined/);
      expect(svg).toContain("t &lt;&amp;&gt; &quot;q&quot;");
      expect((svg.match(/<text /g) ?? []).length).toBe((svg.match(/<\/text>/g) ?? []).length);
      expect(svg.includes("Goodput vs load")).toBe(runs.length > 1);
    }
  });
});
