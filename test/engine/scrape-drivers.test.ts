// The scraper asks each worker's driver where and how to read load (issue 9 item 3): TRT-LLM's
// JSON /metrics and vLLM's KV capacity (num_gpu_blocks) over real HTTP on loopback.
import { afterEach, expect, test } from "bun:test";
import { RealClock } from "../../src/core/clock.ts";
import { MetricsScraper } from "../../src/engine/telemetry/scrape.ts";
import { vllmMetrics } from "../router/exposition.ts";
import { registryWith, worker } from "../router/fixtures.ts";

const servers: ReturnType<typeof Bun.serve>[] = [];
afterEach(() => {
  for (const s of servers.splice(0)) s.stop(true);
});
function serve(body: string, type: string): string {
  const s = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (req) => (new URL(req.url).pathname === "/metrics" ? new Response(body, { headers: { "content-type": type } }) : new Response("", { status: 404 })) });
  servers.push(s);
  return `http://127.0.0.1:${s.port}`;
}

test("trtllm JSON and vLLM Prometheus side by side; vLLM's num_gpu_blocks reaches onKvCapacity", async () => {
  const trt = serve(JSON.stringify([{ iter: 3, numActiveRequests: 4, numQueuedRequests: 2, kvCacheStats: { usedNumBlocks: 50, maxNumBlocks: 200 } }]), "application/json");
  // vllmMetrics carries vllm:cache_config_info{…,num_gpu_blocks="27104",…} as vLLM exports it.
  const v = serve(vllmMetrics({ running: 1, waiting: 0, kv: 0.5 }), "text/plain");
  const registry = registryWith([worker("t", { url: trt, kind: "trtllm" }), worker("v", { url: v, kind: "vllm" })]);
  const capacity: [string, number][] = [];
  const s = new MetricsScraper({ registry, clock: new RealClock(), intervalMs: 0, timeoutMs: 1000, wallNowMs: () => 1, onKvCapacity: (id, n) => capacity.push([id, n]) });
  const out = await s.scrapeOnce();
  await s.stop();
  expect(out.every((o) => o.ok)).toBe(true);
  expect(registry.get("t")?.load).toMatchObject({ running: 4, waiting: 2, kv_usage: 0.25 });
  expect(registry.get("v")?.load).toMatchObject({ running: 1, waiting: 0, kv_usage: 0.5 });
  expect(capacity.sort()).toEqual([["t", 200], ["v", 27104]]);
});
