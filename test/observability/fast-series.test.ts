// fast-series.ts must print what prom-client prints for the same increments and observations:
// /metrics names, labels, order and values are an interface (dashboards, rules, scrapers).
import { describe, expect, test } from "bun:test";
import { Counter, Histogram, Registry } from "prom-client";
import { FastHistogram, TallyCounter } from "../../src/metrics/fast-series.ts";
import { SeededRng } from "../../src/core/rng.ts";

const BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5];

describe("fast series", () => {
  test("a histogram prints as prom-client's Histogram, with the same series in the same order", async () => {
    const ref = new Registry();
    const fast = new Registry();
    const h = new Histogram({ name: "x_seconds", help: "help \\ text", labelNames: ["model", "worker"], buckets: BUCKETS, registers: [ref] });
    const f = new FastHistogram<"model" | "worker">("x_seconds", "help \\ text", BUCKETS, [fast]);
    expect(await fast.metrics()).toBe(await ref.metrics()); // empty: help and type only
    const rng = new SeededRng(3);
    for (let i = 0; i < 2000; i++) {
      const model = ["m1", "m\"2", "unknown"][Math.floor(rng.float() * 3)]!;
      const worker = `w${Math.floor(rng.float() * 4)}`;
      // Values on the bounds, between them, above the last and 0.
      const v = i % 7 === 0 ? BUCKETS[i % BUCKETS.length]! : i % 11 === 0 ? 0 : rng.float() * 4;
      h.observe({ model, worker }, v);
      f.observe(`${model}\0${worker}`, () => ({ model, worker }), v);
    }
    expect(await fast.metrics()).toBe(await ref.metrics());
    expect(JSON.stringify(await fast.getMetricsAsJSON())).toBe(JSON.stringify(await ref.getMetricsAsJSON()));
    expect(() => f.observe("m1\0w0", () => ({ model: "m1", worker: "w0" }), Number.NaN)).toThrow();
  });

  test("a counter's deltas reach prom-client at every scrape, zero increments included", async () => {
    const ref = new Registry();
    const fast = new Registry();
    const c = new Counter({ name: "y_total", help: "y", labelNames: ["model", "status"], registers: [ref] });
    const t = new TallyCounter<"model" | "status">({ name: "y_total", help: "y", labelNames: ["model", "status"], registers: [fast] });
    const inc = (model: string, status: string, n?: number) => {
      c.inc({ model, status }, n);
      t.inc(`${model}\0${status}`, () => ({ model, status }), n);
    };
    inc("m1", "200");
    inc("m1", "200", 3);
    inc("m2", "502", 0); // a series at 0, as prom-client makes one
    expect(await fast.metrics()).toBe(await ref.metrics());
    expect(await fast.metrics()).toContain('y_total{model="m2",status="502"} 0');
    inc("m1", "200", 2.5);
    inc("m3", "429");
    expect(await fast.metrics()).toBe(await ref.metrics());
    expect(await fast.metrics()).toBe(await ref.metrics()); // a scrape with nothing new changes nothing
    expect(() => t.inc("m1\u0000200", () => ({ model: "m1", status: "200" }), -1)).toThrow();
    expect(() => t.inc("m1\u0000200", () => ({ model: "m1", status: "200" }), Number.NaN)).toThrow();
  });
});
