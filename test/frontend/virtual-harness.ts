// A Frontend on a VirtualClock: no sockets, no sleeping. Requests go through app.fetch; legs reach
// workers through an injected Upstream (a SimUpstream over SimSchedulers on the same clock, or an
// HttpUpstream whose fetch is a function). `drive` advances the clock only when every promise has
// settled, so a test runs the same way every time.
import { VirtualClock } from "../../src/core/clock.ts";
import { memoryLogger } from "../helpers/log.ts";
import { defaultConfig } from "../../src/config/index.ts";
import type { Config, FrontendConfig, RouterConfig } from "../../src/config/types.ts";
import { DEFAULT_COST } from "../../src/engine/sim/cost.ts";
import { SimScheduler } from "../../src/engine/sim/scheduler.ts";
import { Frontend } from "../../src/frontend/app.ts";
import { HerdMetrics } from "../../src/metrics/herd-metrics.ts";
import type { PlanBuilder } from "../../src/request/plan.ts";
import { SSE_FRAMES, SimUpstream } from "../../src/request/sim-upstream.ts";
import type { Upstream } from "../../src/request/upstream.ts";
import { Router } from "../../src/router/index.ts";
import { WorkerRegistry } from "../../src/workers/registry.ts";
import { emptyLoad } from "../../src/workers/worker.ts";

export const MODEL = "m1";

export interface VirtualHerd {
  clock: VirtualClock;
  frontend: Frontend;
  registry: WorkerRegistry;
  metrics: HerdMetrics;
  config: Config;
  log: ReturnType<typeof memoryLogger>;
  schedulers: Map<string, SimScheduler>;
  fetch(path: string, body: unknown, headers?: Record<string, string>): Promise<Response>;
  /** Settle every promise, then fire clock timers one by one until `p` settles. */
  drive<T>(p: Promise<T>, maxSteps?: number): Promise<T>;
  /** Settle promises, then advance the clock by ms. */
  advance(ms: number): Promise<void>;
}

const flush = async () => {
  for (let i = 0; i < 5; i++) await new Promise<void>((r) => setImmediate(r));
};

export function virtualHerd(opts: { workers?: number; frontend?: Partial<FrontendConfig>; router?: Partial<RouterConfig>; upstream?: (schedulers: Map<string, SimScheduler>, clock: VirtualClock) => Upstream<Uint8Array>; plan?: PlanBuilder } = {}): VirtualHerd {
  const clock = new VirtualClock(0);
  const config = defaultConfig({ hostname: "testnode", dataDir: "/tmp/herd-test" });
  config.models = [{ name: MODEL, path: MODEL, tokenizer: "", block_size: 16, max_model_len: 0, prefix_caching_hash_algo: "", aliases: [], lora_adapters: [] }];
  config.engines = [];
  config.router.policy = "round-robin";
  config.router.seed = 7;
  Object.assign(config.router, opts.router ?? {});
  Object.assign(config.frontend, opts.frontend ?? {});
  const registry = new WorkerRegistry();
  const schedulers = new Map<string, SimScheduler>();
  for (let i = 0; i < (opts.workers ?? 2); i++) {
    const id = `sim-${i}`;
    registry.upsert({ id, node: "testnode", model: MODEL, role: "aggregated", kind: "sim", url: `sim://${id}`, state: "ready", load: emptyLoad(), restarts: 0 });
    schedulers.set(id, new SimScheduler(
      { blockSize: 16, numBlocks: 1024, maxNumSeqs: 64, maxNumBatchedTokens: 2048, maxWaiting: 64, maxModelLen: 8192, cost: DEFAULT_COST, timeScale: 1, hashSeed: BigInt(i + 1) },
      clock,
    ));
  }
  const log = memoryLogger();
  const router = new Router({ config: config.router, registry, clock, log });
  const metrics = new HerdMetrics([MODEL], () => registry.list());
  const upstream = opts.upstream?.(schedulers, clock) ?? new SimUpstream({ frames: SSE_FRAMES, scheduler: (id) => schedulers.get(id)! });
  const frontend = new Frontend({ config, registry, router, metrics, clock, log, upstream, ...(opts.plan ? { plan: opts.plan } : {}) });
  const drive = async <T>(p: Promise<T>, maxSteps = 100_000): Promise<T> => {
    let settled = false;
    p.then(() => (settled = true), () => (settled = true));
    for (let i = 0; i < maxSteps; i++) {
      await flush();
      if (settled) return p;
      if (!clock.step()) await flush();
    }
    throw new Error("drive: did not settle");
  };
  return {
    clock, frontend, registry, metrics, config, log, schedulers, drive,
    fetch: (path, body, headers = {}) =>
      Promise.resolve(frontend.app.fetch(
        new Request(`http://herd${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) }),
        { ip: "127.0.0.1" },
      )),
    advance: async (ms) => {
      await flush();
      clock.advance(ms);
      await flush();
    },
  };
}
