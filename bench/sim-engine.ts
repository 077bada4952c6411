// Simulated-engine benchmarks (figures printed, nothing asserted):
//  1. Scheduler core on a VirtualClock: how fast `herd simulate` can push simulated traffic
//     (simulated requests and tokens per wall-clock second, and the simulated/real time ratio).
//  2. The HTTP server with --zero-delay: streaming requests/s and client-side latency percentiles at a
//     fixed concurrency — the ceiling herd's frontend and `herd bench` are measured against.
// Usage: bun bench/sim-engine.ts [--requests N] [--concurrency C]

import { VirtualClock } from "../src/core/clock.ts";
import { DEFAULT_COST, ZERO_COST } from "../src/engine/sim/cost.ts";
import { SimScheduler } from "../src/engine/sim/scheduler.ts";
import { startSimEngine } from "../src/engine/sim/server.ts";

const arg = (name: string, def: number) => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : def;
};
const N = arg("requests", 4000);
const C = arg("concurrency", 64);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

// 1. Virtual time: Poisson-ish arrivals of chat-like requests sharing a system prompt.
{
  const clock = new VirtualClock(0);
  const s = new SimScheduler(
    { blockSize: 16, numBlocks: 24_700, maxNumSeqs: 1024, maxNumBatchedTokens: 8192, maxWaiting: 1 << 20, maxModelLen: 40_960, cost: DEFAULT_COST, timeScale: 1, hashSeed: 1n },
    clock,
  );
  const system = Array.from({ length: 1024 }, (_, i) => i + 1);
  let done = 0;
  let tokens = 0;
  const total = 20_000;
  const ratePerMs = 20 / 1000; // 20 req/s offered
  for (let i = 0; i < total; i++) {
    clock.setTimer(i / ratePerMs, () => {
      const prompt = [...system, ...Array.from({ length: 256 }, (_, k) => 100_000 + i * 256 + k)];
      s.submit({
        id: `r${i}`, promptTokens: prompt, maxTokens: 200, ignoreEos: true,
        nextToken: (k) => ({ id: 7 + (k % 1000), eos: false }),
        handlers: { onToken: () => void tokens++, onFinish: () => void done++ },
      });
    });
  }
  const t0 = performance.now();
  while (clock.step());
  const wallS = (performance.now() - t0) / 1000;
  const simS = clock.now() / 1000;
  const st = s.stats();
  console.log(`scheduler (virtual clock): ${total} requests, ${tokens} output tokens, ${simS.toFixed(0)} s simulated in ${wallS.toFixed(2)} s wall`);
  console.log(`  ${(done / wallS).toFixed(0)} simulated req/s, ${(tokens / wallS / 1e6).toFixed(2)} M tokens/s, ${(simS / wallS).toFixed(0)}x real time, ${st.steps} steps (${(st.steps / wallS / 1000).toFixed(1)} k steps/s), prefix hit rate ${((100 * st.prefixHits) / st.prefixQueries).toFixed(1)}%`);
}

// 2. HTTP, zero delay.
{
  const e = await startSimEngine({ port: 0, cost: ZERO_COST, hashSeed: 1n });
  const body = JSON.stringify({ model: "sim", messages: [{ role: "user", content: "benchmark prompt with a few words" }], max_tokens: 16, stream: true });
  const lat: number[] = [];
  const ttft: number[] = [];
  let next = 0;
  const worker = async () => {
    while (next < N) {
      next++;
      const t0 = performance.now();
      const r = await fetch(`${e.url}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
      const reader = r.body!.getReader();
      let first = true;
      for (;;) {
        const { done } = await reader.read();
        if (first) {
          ttft.push(performance.now() - t0);
          first = false;
        }
        if (done) break;
      }
      lat.push(performance.now() - t0);
    }
  };
  // Warm-up.
  next = N - Math.min(N, 200);
  await Promise.all(Array.from({ length: C }, worker));
  lat.length = 0;
  ttft.length = 0;
  next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: C }, worker));
  const s = (performance.now() - t0) / 1000;
  console.log(`http --zero-delay: ${N} streaming chat requests (16 tokens each), concurrency ${C}, client in the same process`);
  console.log(`  ${(N / s).toFixed(0)} req/s; latency p50 ${pct(lat, 50).toFixed(2)} ms p99 ${pct(lat, 99).toFixed(2)} ms; first byte p50 ${pct(ttft, 50).toFixed(2)} ms`);
  await e.stop();
}
