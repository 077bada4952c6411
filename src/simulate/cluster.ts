// A simulated deployment in one process on a VirtualClock: N SimSchedulers (the sim engine's own
// scheduler and timing model), the real WorkerRegistry and Router with the configured policy, the KV
// index fed in-process from the schedulers' events (kv.ts), and the metrics scrape emulated on the
// same clock (running / waiting / kv_usage into the registry every scrape interval, as
// src/engine/telemetry/scrape.ts does over HTTP). No sockets, no sleeping.
import { VirtualClock } from "../core/clock.ts";
import { SeededRng } from "../core/rng.ts";
import type { PolicyName, Role, RouterConfig } from "../config/types.ts";
import { WorkerRegistry } from "../workers/registry.ts";
import { emptyLoad } from "../workers/worker.ts";
import { SimScheduler } from "../engine/sim/scheduler.ts";
import type { SimEngineOptions } from "../engine/sim/options.ts";
import { Router, type RouterObserver } from "../router/router.ts";
import { SimKv } from "./kv.ts";
import { VirtualTier } from "./virtual-tier.ts";
import { QWEN3_8B_KV_BYTES_PER_BLOCK } from "../engine/sim/options.ts";

export interface ClusterConfig {
  /** Served model name (routing only; any string). */
  model: string;
  replicas: number;
  policy: PolicyName;
  /** The router section (defaults from the config schema); `policy` above overrides its policy. */
  router: RouterConfig;
  /**
   * The frontend's admission and stream bounds (frontend.max_in_flight, first_token_timeout_ms,
   * idle_timeout_ms; without idle_timeout_ms a stream's gaps are not bounded).
   */
  frontend: { max_in_flight: number; first_token_timeout_ms: number; idle_timeout_ms?: number };
  /** Sim engine figures: block size, KV blocks, batch limits, cost model, time scale, output seed. */
  engine: SimEngineOptions;
  /** KV events reach the router's index this late (0 = at once). */
  kvEventDelayMs: number;
  seed: number;
  /**
   * The host's CPU KV tier in blocks (virtual-tier.ts), shared by all replicas (one host);
   * 0/absent = none. Block bytes: the engine's --kv-offload-bytes-per-block, else Qwen3-8B's 2.25 MiB;
   * load rate: --kv-offload-load-gb-per-s.
   */
  kvTierBlocks?: number;
  /** Each replica's role (`herd simulate --pd`: prefill and decode pools); absent = all aggregated. */
  roles?: readonly Role[];
  /** Subscribed to the router (decisions, latency forecasts against first tokens): benchmarks' probes. */
  routerObserver?: RouterObserver;
}

export interface Replica {
  id: string;
  scheduler: SimScheduler;
  /** Requests routed here (first attempts and retries). */
  routed: number;
  /** Σ (running + waiting) over scrapes, and the scrape count, for the time-averaged queue. */
  loadSum: number;
  loadPeak: number;
}

export class SimCluster {
  readonly clock = new VirtualClock(0);
  readonly registry = new WorkerRegistry();
  readonly router: Router;
  readonly kv: SimKv;
  readonly replicas: Replica[] = [];
  private readonly byId = new Map<string, Replica>();
  scrapes = 0;
  /** The host's KV tier (cfg.kvTierBlocks > 0). */
  readonly tier: VirtualTier | null = null;

  constructor(readonly cfg: ClusterConfig) {
    const e = cfg.engine;
    this.kv = new SimKv(this.clock, cfg.kvEventDelayMs, e.blockSize, e.kvBlocks);
    for (let i = 0; i < cfg.replicas; i++) {
      const id = `sim-${i}`;
      this.registry.upsert({ id, node: "sim", model: cfg.model, role: cfg.roles?.[i] ?? "aggregated", kind: "sim", url: `sim://${id}`, state: "ready", load: emptyLoad(), restarts: 0 });
      const scheduler = new SimScheduler(
        {
          blockSize: e.blockSize, numBlocks: e.kvBlocks, maxNumSeqs: e.maxNumSeqs, maxNumBatchedTokens: e.maxNumBatchedTokens,
          maxWaiting: e.maxWaiting, maxModelLen: Math.min(e.maxModelLen, e.kvBlocks * e.blockSize), cost: e.cost, timeScale: e.timeScale,
          // Engine-side hashes differ per engine (random PYTHONHASHSEED in vLLM); the index rehashes from tokens.
          hashSeed: BigInt(cfg.seed) * 1000n + BigInt(i) + 1n,
        },
        this.clock,
        this.kv.sink(id),
      );
      if (this.tier === null && (cfg.kvTierBlocks ?? 0) > 0) this.tier = this.newTier(cfg);
      if (this.tier !== null) scheduler.attachOffload(this.tier.engine());
      const r: Replica = { id, scheduler, routed: 0, loadSum: 0, loadPeak: 0 };
      this.replicas.push(r);
      this.byId.set(id, r);
    }
    this.router = new Router({
      config: { ...cfg.router, policy: cfg.policy, seed: cfg.seed || 1 },
      registry: this.registry,
      clock: this.clock,
      rng: new SeededRng(cfg.seed * 7919 + 17),
      kvIndex: this.kv.routerIndex,
    });
    if (cfg.routerObserver) this.router.observe(cfg.routerObserver);
  }

  /** The tier's contents reach the index as medium cpu for every replica (all on this one host). */
  private newTier(cfg: ClusterConfig): VirtualTier {
    const e = cfg.engine;
    const opts = { capacityBlocks: cfg.kvTierBlocks!, bytesPerBlock: e.kvOffloadBytesPerBlock ?? QWEN3_8B_KV_BYTES_PER_BLOCK, loadGbPerS: e.kvOffloadLoadGbPerS, timeScale: e.timeScale };
    return new VirtualTier(opts, this.clock, (kind, hash) => {
      const ev = { kind, medium: "cpu" as const, hashes: [hash] };
      for (let i = 0; i < cfg.replicas; i++) {
        this.kv.truth.apply(`sim-${i}`, ev);
        if (this.kv.routerIndex !== this.kv.truth) this.kv.routerIndex.apply(`sim-${i}`, ev);
      }
    });
  }

  replica(id: string): Replica {
    return this.byId.get(id)!;
  }

  /** Emulate one metrics scrape of every replica (what MetricsScraper writes into the registry). */
  scrape(): void {
    this.scrapes++;
    const now = this.clock.now();
    for (const r of this.replicas) {
      const s = r.scheduler.stats();
      this.registry.updateLoad(r.id, { running: s.running, waiting: s.waiting, kv_usage: s.kvUsage, scraped_at_ms: now });
      const load = s.running + s.waiting;
      r.loadSum += load;
      if (load > r.loadPeak) r.loadPeak = load;
    }
  }
}
