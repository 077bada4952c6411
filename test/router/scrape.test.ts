// The scrape loop against real HTTP servers on loopback (Bun.serve, port 0).
import { afterEach, describe, expect, test } from "bun:test";
import { RealClock, VirtualClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { MetricsScraper } from "../../src/engine/telemetry/scrape.ts";
import type { WorkerRegistry } from "../../src/workers/registry.ts";
import { registryWith, worker } from "./fixtures.ts";
import { sglangMetrics, vllmMetrics } from "./exposition.ts";

type Handler = (req: Request) => Response | Promise<Response>;
const servers: ReturnType<typeof Bun.serve>[] = [];
const scrapers: MetricsScraper[] = [];

function engine(handler: Handler): { url: string; hits: () => number } {
  let hits = 0;
  const s = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: (req) => {
      hits++;
      return new URL(req.url).pathname === "/metrics" ? handler(req) : new Response("not found", { status: 404 });
    },
  });
  servers.push(s);
  return { url: `http://127.0.0.1:${s.port}`, hits: () => hits };
}

function scraper(registry: WorkerRegistry, over: Partial<ConstructorParameters<typeof MetricsScraper>[0]> = {}): MetricsScraper {
  const s = new MetricsScraper({ registry, clock: new RealClock(), intervalMs: 0, timeoutMs: 500, wallNowMs: () => 1234, ...over });
  scrapers.push(s);
  return s;
}

async function until(cond: () => boolean, timeoutMs = 3000): Promise<void> {
  const end = performance.now() + timeoutMs;
  while (!cond()) {
    if (performance.now() > end) throw new Error("condition not met in time");
    await Bun.sleep(10);
  }
}

afterEach(async () => {
  for (const s of scrapers.splice(0)) await s.stop();
  for (const s of servers.splice(0)) s.stop(true);
});

describe("MetricsScraper", () => {
  test("one round fills running/waiting/kv_usage from vLLM and SGLang engines", async () => {
    const v = engine(() => new Response(vllmMetrics({ running: 4, waiting: 2, kv: 0.5 })));
    const g = engine(() => new Response(sglangMetrics({ running: 1, queued: 7, tokenUsage: 0.2 })));
    const registry = registryWith([worker("v", { url: v.url, kind: "vllm" }), worker("g", { url: `${g.url}/`, kind: "sglang" })]);
    const out = await scraper(registry).scrapeOnce();
    expect(out.every((o) => o.ok)).toBe(true);
    expect(registry.get("v")?.load).toMatchObject({ running: 4, waiting: 2, kv_usage: 0.5, scraped_at_ms: 1234, in_flight: 0 });
    expect(registry.get("g")?.load).toMatchObject({ running: 1, waiting: 7, kv_usage: 0.2 });
  });

  test("only ready workers are scraped", async () => {
    const e = engine(() => new Response(vllmMetrics({ running: 1, waiting: 0, kv: 0 })));
    const registry = registryWith([worker("a", { url: e.url, state: "starting" })]);
    const out = await scraper(registry).scrapeOnce();
    expect(out).toEqual([]);
    expect(e.hits()).toBe(0);
  });

  test("failures clear the figures (HTTP error, no metrics, refused) and log once per streak", async () => {
    let mode: "ok" | "500" | "junk" = "ok";
    const e = engine(() =>
      mode === "ok" ? new Response(vllmMetrics({ running: 3, waiting: 3, kv: 0.1 })) : mode === "500" ? new Response("boom", { status: 500 }) : new Response("hello\n"),
    );
    const dead = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response("") });
    const deadUrl = `http://127.0.0.1:${dead.port}`;
    dead.stop(true);
    const registry = registryWith([worker("a", { url: e.url }), worker("dead", { url: deadUrl })]);
    const log = memoryLogger();
    const s = scraper(registry, { log });
    await s.scrapeOnce();
    expect(registry.get("a")?.load.running).toBe(3);
    mode = "500";
    const r = await s.scrapeOnce();
    expect(r.find((o) => o.worker === "a")?.error).toContain("HTTP 500");
    expect(registry.get("a")?.load).toMatchObject({ running: null, waiting: null, kv_usage: null, scraped_at_ms: 1234 });
    mode = "junk";
    expect((await s.scrapeOnce()).find((o) => o.worker === "a")?.ok).toBe(false);
    expect(log.lines.filter((l) => l.includes("scrape failed") && l.includes("worker=a")).length).toBe(1);
    expect(log.lines.filter((l) => l.includes("worker=dead")).length).toBe(1);
    mode = "ok";
    await s.scrapeOnce();
    expect(registry.get("a")?.load.running).toBe(3);
    expect(log.lines.some((l) => l.includes("recovered") && l.includes("worker=a"))).toBe(true);
  });

  test("a hung engine times out; an oversized body is abandoned", async () => {
    const hung = engine(() => new Promise<Response>(() => {}));
    const huge = engine(() => new Response("# padding\n".repeat(20_000) + vllmMetrics({ running: 1, waiting: 1, kv: 0.1 })));
    const registry = registryWith([worker("hung", { url: hung.url }), worker("huge", { url: huge.url })]);
    registry.updateLoad("hung", { running: 9 });
    const t0 = performance.now();
    const out = await scraper(registry, { timeoutMs: 150, maxBytes: 64 * 1024 }).scrapeOnce();
    expect(performance.now() - t0).toBeLessThan(2000);
    expect(out.find((o) => o.worker === "hung")?.error).toContain("timed out");
    expect(out.find((o) => o.worker === "huge")?.error).toContain("over 65536 bytes");
    expect(registry.get("hung")?.load.running).toBeNull();
  });

  test("the loop scrapes every interval and follows the engine's changing load", async () => {
    let running = 1;
    const e = engine(() => new Response(vllmMetrics({ running, waiting: 0, kv: 0.3 })));
    const registry = registryWith([worker("a", { url: e.url })]);
    const s = scraper(registry, { intervalMs: 30 });
    s.start();
    await until(() => registry.get("a")?.load.running === 1);
    running = 6;
    await until(() => registry.get("a")?.load.running === 6);
    await s.stop();
    const hits = e.hits();
    await Bun.sleep(100);
    expect(e.hits()).toBe(hits);
  });

  test("a worker leaving ready has its scraped figures cleared at once", async () => {
    const e = engine(() => new Response(vllmMetrics({ running: 5, waiting: 5, kv: 0.9 })));
    const registry = registryWith([worker("a", { url: e.url })]);
    const s = scraper(registry);
    s.start();
    await s.scrapeOnce();
    expect(registry.get("a")?.load.running).toBe(5);
    registry.setState("a", "starting");
    expect(registry.get("a")?.load).toMatchObject({ running: null, waiting: null, kv_usage: null });
  });

  test("scheduling runs on the injected clock", async () => {
    const clock = new VirtualClock();
    let calls = 0;
    const registry = registryWith([worker("a", { url: "http://127.0.0.1:9" })]);
    const s = scraper(registry, {
      clock,
      intervalMs: 1000,
      fetch: async () => {
        calls++;
        return new Response(vllmMetrics({ running: 2, waiting: 0, kv: 0 }));
      },
    });
    s.start();
    clock.advance(0);
    await Bun.sleep(5);
    expect(calls).toBe(1);
    clock.advance(999);
    await Bun.sleep(5);
    expect(calls).toBe(1);
    clock.advance(1);
    await Bun.sleep(5);
    expect(calls).toBe(2);
    await s.stop();
    clock.advance(5000);
    await Bun.sleep(5);
    expect(calls).toBe(2);
  });
});
